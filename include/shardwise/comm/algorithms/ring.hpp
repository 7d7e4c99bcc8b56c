#pragma once
// Ring: every rank sends to its neighbour r+d and receives from r−d, one block (1/P of the buffer) per
// step, so every link of the ring carries one message per step and each rank sends (P−1)/P of the
// buffer per pass. The direction d is +1 or −1: two rings of opposite directions use the two
// directions of full-duplex links, each moving half of every block (channels, pattern.hpp). The
// neighbours are those of an `order`, the ranks' own or rotated inside nodes; the blocks are always
// the ranks' own, so every order ends with block r on rank r.
#include "shardwise/comm/algorithms/algorithm.hpp"

namespace shardwise::algorithms::ring {

// The order of a ring of P ranks: position i (mod P) is rank at(i, P). Rotated in nodes of k: node
// j's ranks in turn from its local rank `rotation`, so rings of other rotations leave each node from
// another rank. The default is the ranks' own order.
struct order {
  int ranks_per_node = 1;
  int rotation = 0;
  [[nodiscard]] constexpr int at(int position, int ranks) const noexcept {
    const int k = ranks_per_node, p = modulo(position, ranks);
    return p / k * k + (p % k + rotation) % k;
  }
  [[nodiscard]] constexpr int position_of(int rank) const noexcept {
    const int k = ranks_per_node;
    return rank / k * k + ((rank % k - rotation) % k + k) % k;
  }
};

[[nodiscard]] constexpr int all_gather_steps(int ranks) noexcept { return ranks - 1; }
[[nodiscard]] constexpr int reduce_scatter_steps(int ranks) noexcept { return ranks - 1; }
[[nodiscard]] constexpr int all_reduce_steps(int ranks) noexcept { return 2 * (ranks - 1); }

// Below, rank r is at position p of the order, and "position i's block" is the block of rank
// at(i, P).
// Rank r starts with its own block, p's. At step k it sends position (p−dk)'s block to position p+d
// and receives position (p−d(k+1))'s from p−d, which it keeps: after P−1 steps it holds every block.
template <class Size>
[[nodiscard]] constexpr rank_exchange<Size> all_gather(int ranks, int rank, int step, Size whole, int direction = 1,
                                                       order o = {}) noexcept {
  const int d = direction, p = o.position_of(rank);
  return {o.at(p + d, ranks), part_of(whole, ranks, o.at(p - d * step, ranks)), o.at(p - d, ranks),
          part_of(whole, ranks, o.at(p - d * (step + 1), ranks)), false};
}

// At step k rank r sends its partial sum of position (p−d(k+1))'s block to position p+d and receives
// the partial sum of position (p−d(k+2))'s from p−d, which it reduces into its own: the block received
// at the last step, P−2, is position p's, its own, complete.
template <class Size>
[[nodiscard]] constexpr rank_exchange<Size> reduce_scatter(int ranks, int rank, int step, Size whole, int direction = 1,
                                                           order o = {}) noexcept {
  const int d = direction, p = o.position_of(rank);
  return {o.at(p + d, ranks), part_of(whole, ranks, o.at(p - d * (step + 1), ranks)), o.at(p - d, ranks),
          part_of(whole, ranks, o.at(p - d * (step + 2), ranks)), true};
}

// A reduce-scatter, which leaves block r complete on rank r, then an all-gather of the blocks.
template <class Size>
[[nodiscard]] constexpr rank_exchange<Size> all_reduce(int ranks, int rank, int step, Size whole, int direction = 1,
                                                       order o = {}) noexcept {
  return step < reduce_scatter_steps(ranks)
             ? reduce_scatter(ranks, rank, step, whole, direction, o)
             : all_gather(ranks, rank, step - reduce_scatter_steps(ranks), whole, direction, o);
}

}  // namespace shardwise::algorithms::ring
