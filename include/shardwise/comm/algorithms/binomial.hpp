#pragma once
// Binomial trees over the ranks numbered from the root (v = r − root mod P). Broadcast: in round k the
// 2^k ranks v < 2^k that hold the data send it to v + 2^k. Reduce runs the rounds backwards: in round
// k, d = 2^(⌈log P⌉−1−k), rank v in [d, 2d) sends its partial result to v − d, which reduces it in.
// ⌈log P⌉ rounds of the whole buffer.
#include "shardwise/comm/algorithms/algorithm.hpp"

namespace shardwise::algorithms::binomial {

[[nodiscard]] constexpr int steps(int ranks) noexcept { return ceil_log2(ranks); }

template <class Size>
[[nodiscard]] constexpr rank_exchange<Size> broadcast(int ranks, int rank, int step, Size whole, int root) noexcept {
  const int distance = 1 << step;
  const int v = modulo(rank - root, ranks);
  const part<Size> everything{Size{}, whole};
  rank_exchange<Size> exchange;
  if (v < distance && v + distance < ranks) exchange = {modulo(rank + distance, ranks), everything, -1, {}, false};
  else if (v >= distance && v < 2 * distance)
    exchange = {-1, {}, modulo(rank - distance, ranks), everything, false};
  return exchange;
}

template <class Size>
[[nodiscard]] constexpr rank_exchange<Size> reduce(int ranks, int rank, int step, Size whole, int root) noexcept {
  const int distance = 1 << (steps(ranks) - 1 - step);
  const int v = modulo(rank - root, ranks);
  const part<Size> everything{Size{}, whole};
  rank_exchange<Size> exchange;
  if (v < distance && v + distance < ranks) exchange = {-1, {}, modulo(rank + distance, ranks), everything, true};
  else if (v >= distance && v < 2 * distance)
    exchange = {modulo(rank - distance, ranks), everything, -1, {}, false};
  return exchange;
}

}  // namespace shardwise::algorithms::binomial
