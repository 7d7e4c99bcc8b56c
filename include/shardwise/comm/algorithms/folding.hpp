#pragma once
// Running an algorithm for a power of two of ranks on any P: the ranks beyond P' = 2^⌊log P⌋ first
// send their whole buffer to rank r − P', which reduces it into its own; the P' lower ranks run the
// algorithm; then each of them sends the result back to the rank that folded into it. Two more steps
// of the whole buffer, and the extra ranks idle in between.
#include <bit>

#include "shardwise/comm/algorithms/algorithm.hpp"

namespace shardwise::algorithms::folding {

[[nodiscard]] constexpr int lower_ranks(int ranks) noexcept {
  return static_cast<int>(std::bit_floor(static_cast<unsigned>(ranks)));
}

[[nodiscard]] constexpr int steps(int ranks, int inner_steps) noexcept {
  return lower_ranks(ranks) == ranks ? inner_steps : inner_steps + 2;
}

// Step k of the folded algorithm, given the inner one as inner(ranks, rank, step) on P' ranks.
template <class Size, class Inner>
[[nodiscard]] constexpr rank_exchange<Size> step(int ranks, int rank, int k, Size whole, int inner_steps,
                                                 const Inner& inner) {
  const int lower = lower_ranks(ranks);
  if (lower == ranks) return inner(ranks, rank, k);
  const part<Size> everything{Size{}, whole};
  rank_exchange<Size> exchange;
  if (k == 0) {  // fold in
    if (rank >= lower) exchange = {rank - lower, everything, -1, {}, false};
    else if (rank + lower < ranks)
      exchange = {-1, {}, rank + lower, everything, true};
  } else if (k == inner_steps + 1) {  // and back out
    if (rank >= lower) exchange = {-1, {}, rank - lower, everything, false};
    else if (rank + lower < ranks)
      exchange = {rank + lower, everything, -1, {}, false};
  } else if (rank < lower) {
    exchange = inner(lower, rank, k - 1);
  }
  return exchange;
}

}  // namespace shardwise::algorithms::folding
