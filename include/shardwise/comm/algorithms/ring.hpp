#pragma once
// Ring: every rank sends to r+1 and receives from r−1, one block (1/P of the buffer) per step, so every
// link carries one message per step and each rank sends (P−1)/P of the buffer per pass.
#include "shardwise/comm/algorithms/algorithm.hpp"

namespace shardwise::algorithms::ring {

[[nodiscard]] constexpr int all_gather_steps(int ranks) noexcept { return ranks - 1; }
[[nodiscard]] constexpr int reduce_scatter_steps(int ranks) noexcept { return ranks - 1; }
[[nodiscard]] constexpr int all_reduce_steps(int ranks) noexcept { return 2 * (ranks - 1); }

// Rank r starts with block r. At step k it sends block (r−k) mod P to r+1 and receives block
// (r−k−1) mod P from r−1, which it keeps: after P−1 steps it holds every block.
template <class Size>
[[nodiscard]] constexpr rank_exchange<Size> all_gather(int ranks, int rank, int step, Size whole) noexcept {
  return {modulo(rank + 1, ranks), part_of(whole, ranks, modulo(rank - step, ranks)), modulo(rank - 1, ranks),
          part_of(whole, ranks, modulo(rank - step - 1, ranks)), false};
}

// At step k rank r sends its partial sum of block (r−k−1) mod P to r+1 and receives the partial sum of
// block (r−k−2) mod P from r−1, which it reduces into its own: the block received at the last step,
// P−2, is block r, complete.
template <class Size>
[[nodiscard]] constexpr rank_exchange<Size> reduce_scatter(int ranks, int rank, int step, Size whole) noexcept {
  return {modulo(rank + 1, ranks), part_of(whole, ranks, modulo(rank - step - 1, ranks)), modulo(rank - 1, ranks),
          part_of(whole, ranks, modulo(rank - step - 2, ranks)), true};
}

// A reduce-scatter, which leaves block r complete on rank r, then an all-gather of the blocks.
template <class Size>
[[nodiscard]] constexpr rank_exchange<Size> all_reduce(int ranks, int rank, int step, Size whole) noexcept {
  return step < reduce_scatter_steps(ranks) ? reduce_scatter(ranks, rank, step, whole)
                                            : all_gather(ranks, rank, step - reduce_scatter_steps(ranks), whole);
}

}  // namespace shardwise::algorithms::ring
