#pragma once
// Recursive doubling and halving (P a power of two; all-reduce folds other P, folding.hpp): in each
// step rank r pairs with r XOR d, so log P steps reach every rank.
#include <bit>

#include "shardwise/comm/algorithms/algorithm.hpp"
#include "shardwise/comm/algorithms/folding.hpp"

namespace shardwise::algorithms::recursive_doubling {

[[nodiscard]] constexpr int log2_of(int ranks) noexcept {
  return static_cast<int>(std::bit_width(static_cast<unsigned>(ranks))) - 1;
}
[[nodiscard]] constexpr int all_gather_steps(int ranks) noexcept { return log2_of(ranks); }
[[nodiscard]] constexpr int reduce_scatter_steps(int ranks) noexcept { return log2_of(ranks); }
[[nodiscard]] constexpr int all_reduce_steps(int ranks) noexcept {
  return folding::steps(ranks, log2_of(folding::lower_ranks(ranks)));
}

// Step k, d = 2^k: rank r holds the d blocks of its group (the blocks of ranks equal to r but in the
// lowest k bits), sends them to r XOR d and receives that rank's group: the groups double.
template <class Size>
[[nodiscard]] constexpr rank_exchange<Size> all_gather(int ranks, int rank, int step, Size whole) noexcept {
  const int distance = 1 << step;
  const int mine = rank & ~(distance - 1);
  const int theirs = mine ^ distance;
  return {rank ^ distance, parts_of(whole, ranks, mine, mine + distance), rank ^ distance,
          parts_of(whole, ranks, theirs, theirs + distance), false};
}

// Recursive halving. Step k, d = P/2^(k+1): rank r is responsible for the 2d blocks of its group (the
// blocks of the ranks that equal r but in the bits below 2d); it keeps the half holding block r, sends
// the other half to r XOR d and reduces that rank's copy of the kept half into its own. After log P
// steps rank r holds block r, complete.
template <class Size>
[[nodiscard]] constexpr rank_exchange<Size> reduce_scatter(int ranks, int rank, int step, Size whole) noexcept {
  const int distance = ranks >> (step + 1);
  const int group = rank & ~(2 * distance - 1);
  const int kept = group + (rank & distance);
  const int given = group + ((rank & distance) ^ distance);
  return {rank ^ distance, parts_of(whole, ranks, given, given + distance), rank ^ distance,
          parts_of(whole, ranks, kept, kept + distance), true};
}

// Step k, d = 2^k: rank r sends its whole partial result to r XOR d and reduces that rank's into it.
template <class Size>
[[nodiscard]] constexpr rank_exchange<Size> all_reduce(int ranks, int rank, int step, Size whole) noexcept {
  const int lower = folding::lower_ranks(ranks);
  return folding::step(ranks, rank, step, whole, log2_of(lower), [whole](int, int r, int k) {
    const part<Size> everything{Size{}, whole};
    return rank_exchange<Size>{r ^ (1 << k), everything, r ^ (1 << k), everything, true};
  });
}

}  // namespace shardwise::algorithms::recursive_doubling
