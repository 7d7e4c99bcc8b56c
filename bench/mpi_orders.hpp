#pragma once
// How the MPI benchmarks drive their ranks: rank 0 runs Google Benchmark and, before each MPI
// measurement, broadcasts an order (a small trivially copyable struct) saying what to run on how many
// ranks; the other ranks carry out orders until the stop. mpi_driver is that protocol, so a benchmark
// writes only its orders and one rank's part of an order.
// The other ranks wait for orders asleep (test + 5 ms sleep), so they do not take the cores that a
// threads variant is measured on: MPI's own blocking waits would spin, and shorter polls were measured
// to disturb the threads runs. Both sides use MPI_Ibcast, since a blocking broadcast does not match a
// non-blocking one.
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <chrono>
#include <concepts>
#include <thread>
#include <type_traits>

#include "shardwise/comm/mpi.hpp"

namespace shardwise::bench {

template <class Order>
Order receive_order() {
  static_assert(std::is_trivially_copyable_v<Order>, "an order travels as bytes");
  Order next{};
  MPI_Request pending = MPI_REQUEST_NULL;
  MPI_Ibcast(&next, sizeof next, MPI_BYTE, 0, MPI_COMM_WORLD, &pending);
  for (int done = 0;;) {
    MPI_Test(&pending, &done, MPI_STATUS_IGNORE);
    if (done != 0) return next;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

template <class Order>
void send_order(Order next) {
  static_assert(std::is_trivially_copyable_v<Order>, "an order travels as bytes");
  MPI_Request pending = MPI_REQUEST_NULL;
  MPI_Ibcast(&next, sizeof next, MPI_BYTE, 0, MPI_COMM_WORLD, &pending);
  MPI_Wait(&pending, MPI_STATUS_IGNORE);
}

// An order runs on the world's first `ranks` ranks; the value-initialised order (ranks = 0) is the stop.
template <class Order>
concept mpi_order =
    std::is_trivially_copyable_v<Order> && std::default_initializable<Order> && requires(const Order& order) {
      { order.ranks } -> std::convertible_to<int>;
    };

// The driver of one benchmark program over `world`. `part(group, order, state)` is one rank's share of
// an order on `group`, the order's ranks split off the world; `state` is Google Benchmark's on rank 0
// inside a measurement and null elsewhere (the part then runs the iterations the order names).
template <mpi_order Order, class Result>
class mpi_driver {
 public:
  mpi_driver(mpi::communicator& world, Result (*part)(mpi::communicator&, const Order&, benchmark::State*))
      : world_(&world), part_(part) {}

  // Ranks other than 0: carry out rank 0's orders until it says stop.
  void follow() {
    for (Order order = receive_order<Order>(); order.ranks != 0; order = receive_order<Order>()) {
      auto group = split(order);
      if (world_->rank() < order.ranks) part_(group, order, nullptr);
    }
  }

  // Rank 0, in a benchmark or outside one (state null, e.g. a correctness check): has the other ranks
  // carry out `order` and returns its own part's result (rank 0 is in every order's group).
  Result run(const Order& order, benchmark::State* state) {
    send_order(order);
    auto group = split(order);
    return part_(group, order, state);
  }

  // Rank 0, after the last order: lets the other ranks leave follow().
  void stop() { send_order(Order{}); }

 private:
  // A collective over the world: the ranks left out of the order take part too.
  mpi::communicator split(const Order& order) {
    return world_->split(world_->rank() < order.ranks ? 0 : 1, world_->rank());
  }

  mpi::communicator* world_;
  Result (*part_)(mpi::communicator&, const Order&, benchmark::State*);
};

}  // namespace shardwise::bench
