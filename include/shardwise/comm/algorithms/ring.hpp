#pragma once
// Ring: every rank sends to its neighbour r+d and receives from r−d, one block (1/P of the buffer) per
// step, so every link of the ring carries one message per step and each rank sends (P−1)/P of the
// buffer per pass. The direction d is +1 or −1: two rings of opposite directions use the two
// directions of full-duplex links, each moving half of every block (channels, pattern.hpp).
#include "shardwise/comm/algorithms/algorithm.hpp"

namespace shardwise::algorithms::ring {

[[nodiscard]] constexpr int all_gather_steps(int ranks) noexcept { return ranks - 1; }
[[nodiscard]] constexpr int reduce_scatter_steps(int ranks) noexcept { return ranks - 1; }
[[nodiscard]] constexpr int all_reduce_steps(int ranks) noexcept { return 2 * (ranks - 1); }

// Rank r starts with block r. At step k it sends block (r−dk) mod P to r+d and receives block
// (r−d(k+1)) mod P from r−d, which it keeps: after P−1 steps it holds every block.
template <class Size>
[[nodiscard]] constexpr rank_exchange<Size> all_gather(int ranks, int rank, int step, Size whole,
                                                       int direction = 1) noexcept {
  const int d = direction;
  return {modulo(rank + d, ranks), part_of(whole, ranks, modulo(rank - d * step, ranks)), modulo(rank - d, ranks),
          part_of(whole, ranks, modulo(rank - d * (step + 1), ranks)), false};
}

// At step k rank r sends its partial sum of block (r−d(k+1)) mod P to r+d and receives the partial sum
// of block (r−d(k+2)) mod P from r−d, which it reduces into its own: the block received at the last
// step, P−2, is block r, complete.
template <class Size>
[[nodiscard]] constexpr rank_exchange<Size> reduce_scatter(int ranks, int rank, int step, Size whole,
                                                           int direction = 1) noexcept {
  const int d = direction;
  return {modulo(rank + d, ranks), part_of(whole, ranks, modulo(rank - d * (step + 1), ranks)), modulo(rank - d, ranks),
          part_of(whole, ranks, modulo(rank - d * (step + 2), ranks)), true};
}

// A reduce-scatter, which leaves block r complete on rank r, then an all-gather of the blocks.
template <class Size>
[[nodiscard]] constexpr rank_exchange<Size> all_reduce(int ranks, int rank, int step, Size whole,
                                                       int direction = 1) noexcept {
  return step < reduce_scatter_steps(ranks)
             ? reduce_scatter(ranks, rank, step, whole, direction)
             : all_gather(ranks, rank, step - reduce_scatter_steps(ranks), whole, direction);
}

}  // namespace shardwise::algorithms::ring
