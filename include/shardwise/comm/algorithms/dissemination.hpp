#pragma once
// Dissemination barrier: in round k rank r signals r + 2^k and waits for r − 2^k; after ⌈log P⌉ rounds
// every rank has heard, directly or through others, from every rank.
#include "shardwise/comm/algorithms/algorithm.hpp"

namespace shardwise::algorithms::dissemination {

[[nodiscard]] constexpr int steps(int ranks) noexcept { return ceil_log2(ranks); }

template <class Size>
[[nodiscard]] constexpr rank_exchange<Size> barrier(int ranks, int rank, int step) noexcept {
  return {modulo(rank + (1 << step), ranks), {}, modulo(rank - (1 << step), ranks), {}, false};
}

}  // namespace shardwise::algorithms::dissemination
