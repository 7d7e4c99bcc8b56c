#pragma once
// Pairwise all-to-all: at step k (k = 1 … P−1) rank r sends its block for r+k to r+k and receives the
// block r−k has for it, so every rank sends and receives exactly one block per step. (Its own block
// does not travel.) Written here for steps numbered from 0.
#include "shardwise/comm/algorithms/algorithm.hpp"

namespace shardwise::algorithms::pairwise {

[[nodiscard]] constexpr int steps(int ranks) noexcept { return ranks - 1; }

[[nodiscard]] constexpr int send_to(int ranks, int rank, int step) noexcept { return modulo(rank + step + 1, ranks); }
[[nodiscard]] constexpr int receive_from(int ranks, int rank, int step) noexcept {
  return modulo(rank - step - 1, ranks);
}

// Block d of the input goes to rank d; the block from rank s lands at block s of the output.
template <class Size>
[[nodiscard]] constexpr rank_exchange<Size> all_to_all(int ranks, int rank, int step, Size whole) noexcept {
  const int to = send_to(ranks, rank, step);
  const int from = receive_from(ranks, rank, step);
  return {to, part_of(whole, ranks, to), from, part_of(whole, ranks, from), false};
}

}  // namespace shardwise::algorithms::pairwise
