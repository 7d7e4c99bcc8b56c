#pragma once
// Communication accounting: how many collective calls a communicator has issued and how many bytes
// this rank sent and received through them. Every communicator counts (communicator_interface does it
// for every backend), and process_mesh reports the counts of each axis (mesh/process_mesh.hpp):
//
//   const auto before = mesh.traffic();
//   auto c = matmul(a, b);
//   const auto moved = mesh.traffic() - before;     // moved.axes[1].bytes_received: the all-gather in y
//
// The counts are the volumes of the bandwidth-optimal algorithms (ring, pairwise exchange), the ones
// the papers count, not what a particular backend happens to copy: with P ranks and a block of b bytes,
//   all_gather, reduce_scatter, all_to_all   (P-1)·b sent and received
//   all_reduce of n bytes                    2·(P-1)·n/P sent and received (reduce-scatter + all-gather)
//   all_to_all_v                             the counts to and from other ranks
//   broadcast of n bytes                     n sent by the root, n received by every other rank
//   reduce of n bytes                        n sent by every rank but the root, (P-1)·n received by it
//   send / recv                              the message
// A rank's data to itself is never counted; on one rank everything is zero (the call still counts).
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <string>

#include "shardwise/comm/calls.hpp"

namespace shardwise {

struct traffic_count {
  std::int64_t calls = 0;
  std::int64_t bytes_sent = 0;
  std::int64_t bytes_received = 0;

  traffic_count& operator+=(const traffic_count& other) noexcept {
    calls += other.calls;
    bytes_sent += other.bytes_sent;
    bytes_received += other.bytes_received;
    return *this;
  }
  traffic_count& operator-=(const traffic_count& other) noexcept {
    calls -= other.calls;
    bytes_sent -= other.bytes_sent;
    bytes_received -= other.bytes_received;
    return *this;
  }
  friend traffic_count operator+(traffic_count a, const traffic_count& b) noexcept { return a += b; }
  friend traffic_count operator-(traffic_count a, const traffic_count& b) noexcept { return a -= b; }
  friend bool operator==(const traffic_count&, const traffic_count&) = default;
};

[[nodiscard]] inline std::string to_string(const traffic_count& t) {
  return std::to_string(t.calls) + " calls, " + std::to_string(t.bytes_sent) + " B sent, " +
         std::to_string(t.bytes_received) + " B received";
}

namespace detail {

template <class T>
std::int64_t bytes(std::size_t elements) {
  return static_cast<std::int64_t>(elements * sizeof(T));
}
// Elements exchanged with other ranks under per-rank counts: all but this rank's own entry.
inline std::int64_t others(std::span<const int> counts, int rank) {
  const std::int64_t all = std::accumulate(counts.begin(), counts.end(), std::int64_t{0});
  return all - counts[static_cast<std::size_t>(rank)];
}

}  // namespace detail

// The traffic of one call on `rank` of a communicator of `size` ranks (arguments already checked).
template <class T>
traffic_count traffic_of(const calls::all_reduce<T>& c, int, int size) {
  const std::int64_t moved = 2 * (size - 1) * detail::bytes<T>(c.in.size()) / size;
  return {1, moved, moved};
}
template <class T>
traffic_count traffic_of(const calls::reduce<T>& c, int rank, int size) {
  const std::int64_t n = detail::bytes<T>(c.in.size());
  return rank == c.root ? traffic_count{1, 0, (size - 1) * n} : traffic_count{1, n, 0};
}
template <class T>
traffic_count traffic_of(const calls::reduce_scatter<T>& c, int, int size) {
  const std::int64_t moved = (size - 1) * detail::bytes<T>(c.out.size());
  return {1, moved, moved};
}
template <class T>
traffic_count traffic_of(const calls::all_gather<T>& c, int, int size) {
  const std::int64_t moved = (size - 1) * detail::bytes<T>(c.in.size());
  return {1, moved, moved};
}
template <class T>
traffic_count traffic_of(const calls::all_to_all<T>& c, int, int size) {
  const std::int64_t moved = (size - 1) * detail::bytes<T>(c.in.size() / static_cast<std::size_t>(size));
  return {1, moved, moved};
}
template <class T>
traffic_count traffic_of(const calls::all_to_all_v<T>& c, int rank, int) {
  return {1, static_cast<std::int64_t>(sizeof(T)) * detail::others(c.send_counts, rank),
          static_cast<std::int64_t>(sizeof(T)) * detail::others(c.receive_counts, rank)};
}
template <class T>
traffic_count traffic_of(const calls::broadcast<T>& c, int rank, int size) {
  const std::int64_t n = size > 1 ? detail::bytes<T>(c.data.size()) : 0;
  return rank == c.root ? traffic_count{1, n, 0} : traffic_count{1, 0, n};
}
template <class T>
traffic_count traffic_of(const calls::send<T>& c, int, int) {
  return {1, detail::bytes<T>(c.data.size()), 0};
}
template <class T>
traffic_count traffic_of(const calls::recv<T>& c, int, int) {
  return {1, 0, detail::bytes<T>(c.data.size())};
}
inline traffic_count traffic_of(const calls::barrier&, int, int) { return {1, 0, 0}; }

}  // namespace shardwise
