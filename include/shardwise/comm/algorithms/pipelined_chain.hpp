#pragma once
// Pipelined chain: the ranks form a chain root → root+1 → … (v counted from the root) and the buffer
// travels along it in s segments, so after the pipeline fills every link carries one segment per step:
// P + s − 2 steps of n/s. Broadcast: segment t crosses v → v+1 in step t + v. Reduce runs the chain
// the other way: segment t crosses v+1 → v in step t + P − 2 − v, and v reduces it into its own before
// passing it on, as NCCL's ring reduce and MPI's segmented chain reduce do for large messages.
#include <algorithm>
#include <cmath>

#include "shardwise/comm/algorithms/algorithm.hpp"

namespace shardwise::algorithms::pipelined_chain {

// Segments of at most `segment_bytes` (at least one) for a message of `bytes`.
[[nodiscard]] inline int segments(double bytes, double segment_bytes) {
  return static_cast<int>(std::max(1.0, std::ceil(bytes / segment_bytes)));
}

// The segments `chosen` cuts a message of `bytes` into: the pipelined chain's of at most
// `segment_bytes`, one for every other algorithm.
[[nodiscard]] inline int segments(algorithm chosen, double bytes, double segment_bytes) {
  return chosen == algorithm::pipelined ? segments(bytes, segment_bytes) : 1;
}

[[nodiscard]] constexpr int steps(int ranks, int segments) noexcept { return ranks <= 1 ? 0 : ranks + segments - 2; }

template <class Size>
[[nodiscard]] constexpr rank_exchange<Size> broadcast(int ranks, int rank, int step, Size whole, int root,
                                                      int segments) noexcept {
  const int v = modulo(rank - root, ranks);
  const int sending = step - v;        // the segment crossing v → v+1 now
  const int receiving = step - v + 1;  // the one crossing v−1 → v
  rank_exchange<Size> exchange;
  if (v + 1 < ranks && sending >= 0 && sending < segments) {
    exchange.send_to = modulo(rank + 1, ranks);
    exchange.sent = part_of(whole, segments, sending);
  }
  if (v > 0 && receiving >= 0 && receiving < segments) {
    exchange.receive_from = modulo(rank - 1, ranks);
    exchange.received = part_of(whole, segments, receiving);
  }
  return exchange;
}

template <class Size>
[[nodiscard]] constexpr rank_exchange<Size> reduce(int ranks, int rank, int step, Size whole, int root,
                                                   int segments) noexcept {
  const int v = modulo(rank - root, ranks);
  const int sending = step - (ranks - 1 - v);    // the segment crossing v → v−1 now
  const int receiving = step - (ranks - 2 - v);  // the one crossing v+1 → v
  rank_exchange<Size> exchange;
  if (v > 0 && sending >= 0 && sending < segments) {
    exchange.send_to = modulo(rank - 1, ranks);
    exchange.sent = part_of(whole, segments, sending);
  }
  if (v + 1 < ranks && receiving >= 0 && receiving < segments) {
    exchange.receive_from = modulo(rank + 1, ranks);
    exchange.received = part_of(whole, segments, receiving);
    exchange.reduce = true;
  }
  return exchange;
}

}  // namespace shardwise::algorithms::pipelined_chain
