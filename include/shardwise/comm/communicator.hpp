#pragma once
// The contract every backend meets (threads, MPI, and the simulated GPU queue). Generic code takes
// `communicator auto&` and runs unchanged on each.
//
// A backend derives from communicator_interface<Backend> (which supplies the user-facing API over
// contiguous ranges) and provides:
//   int rank() const, int size() const, int world_rank() const    (world_rank: the rank errors name)
//   Backend split(int color, int key)   a collective: ranks with equal colour form a communicator,
//                                       ordered by key, then by rank
// and, private, reached through comm/detail/backend_hooks.hpp:
//   void run(const calls::X<T>&)        for every descriptor in calls.hpp (blocking)
//   request start(const calls::X<T>&)   the same, non-blocking
// The interface counts every call's traffic (traffic(), comm/traffic.hpp).
// Communicators are move-only: each holds the sequence of collectives it has issued.
//
// As in MPI, every rank of a communicator issues the same collectives in the same order, each in the
// same form (all blocking, or all started with i…); a started collective matches only started ones.
#include <concepts>
#include <span>

#include "shardwise/comm/interface.hpp"
#include "shardwise/comm/reduction.hpp"
#include "shardwise/comm/traffic.hpp"

namespace shardwise {

// A handle to a started operation. wait() blocks until this rank's part is complete and its buffers
// may be reused; test() makes progress and reports completion without blocking.
template <class R>
concept request = std::movable<R> && requires(R& r) {
  r.wait();
  { r.test() } -> std::convertible_to<bool>;
};

template <class C>
concept communicator =
    std::movable<C> && !std::copyable<C> &&
    requires(C& c, const C& cc, std::span<const float> in, std::span<float> out, std::span<const int> counts) {
      { cc.rank() } -> std::convertible_to<int>;
      { cc.size() } -> std::convertible_to<int>;
      { cc.world_rank() } -> std::convertible_to<int>;
      { cc.traffic() } -> std::convertible_to<traffic_count>;
      typename C::request;
      requires request<typename C::request>;
      c.all_reduce(in, out, op::sum);
      c.all_reduce(out, op::sum);
      c.reduce(in, out, op::sum, 0);
      c.reduce_scatter(in, out, op::sum);
      c.all_gather(in, out);
      c.all_to_all(in, out);
      c.all_to_all_v(in, counts, out, counts);
      c.all_to_all_v(in, counts, out, counts, output_stores::through_caches);
      c.broadcast(out, 0);
      c.send(in, 0, 0);
      c.recv(out, 0, 0);
      c.barrier();
      { c.split(0, 0) } -> std::same_as<C>;
      { c.iall_reduce(in, out, op::sum) } -> std::same_as<typename C::request>;
      { c.ireduce(in, out, op::sum, 0) } -> std::same_as<typename C::request>;
      { c.ireduce_scatter(in, out, op::sum) } -> std::same_as<typename C::request>;
      { c.iall_gather(in, out) } -> std::same_as<typename C::request>;
      { c.iall_to_all(in, out) } -> std::same_as<typename C::request>;
      { c.iall_to_all_v(in, counts, out, counts) } -> std::same_as<typename C::request>;
      { c.ibroadcast(out, 0) } -> std::same_as<typename C::request>;
      { c.isend(in, 0, 0) } -> std::same_as<typename C::request>;
      { c.irecv(out, 0, 0) } -> std::same_as<typename C::request>;
      { c.ibarrier() } -> std::same_as<typename C::request>;
    };

}  // namespace shardwise
