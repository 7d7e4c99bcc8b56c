#pragma once
// How the MPI benchmarks drive their ranks: rank 0 runs Google Benchmark and, before each MPI
// measurement, broadcasts an order (a small trivially copyable struct) saying what to run on how many
// ranks. The other ranks wait for orders asleep (test + 5 ms sleep), so they do not take the cores
// that a threads variant is measured on: MPI's own blocking waits would spin, and shorter polls were
// measured to disturb the threads runs. Both sides use MPI_Ibcast, since a blocking broadcast does not
// match a non-blocking one.
#include <mpi.h>

#include <chrono>
#include <thread>
#include <type_traits>

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

}  // namespace shardwise::bench
