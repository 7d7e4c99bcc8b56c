#pragma once
// Rabenseifner's all-reduce: a reduce-scatter by recursive halving, then an all-gather by recursive
// doubling, on the P' = 2^⌊log P⌋ lower ranks (the others fold in, folding.hpp). Each rank sends
// 2(P'−1)/P' of the buffer in 2 log P' steps: the ring's bandwidth in log-many steps.
#include "shardwise/comm/algorithms/algorithm.hpp"
#include "shardwise/comm/algorithms/folding.hpp"
#include "shardwise/comm/algorithms/recursive_doubling.hpp"

namespace shardwise::algorithms::rabenseifner {

[[nodiscard]] constexpr int all_reduce_steps(int ranks) noexcept {
  return folding::steps(ranks, 2 * recursive_doubling::log2_of(folding::lower_ranks(ranks)));
}

template <class Size>
[[nodiscard]] constexpr rank_exchange<Size> all_reduce(int ranks, int rank, int step, Size whole) noexcept {
  const int lower = folding::lower_ranks(ranks);
  const int halving = recursive_doubling::log2_of(lower);
  return folding::step(ranks, rank, step, whole, 2 * halving, [whole, halving](int p, int r, int k) {
    return k < halving ? recursive_doubling::reduce_scatter(p, r, k, whole)
                       : recursive_doubling::all_gather(p, r, k - halving, whole);
  });
}

}  // namespace shardwise::algorithms::rabenseifner
