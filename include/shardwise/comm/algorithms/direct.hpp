#pragma once
// Direct all-to-all: every rank sends each of its blocks straight to the rank it is for, all at once,
// as NCCL's all-to-all does — the exchanges of every pairwise step (pairwise.hpp) posted together as
// one step. Where each pair of ranks has a link of its own (GPUs joined pair by pair) the P − 1 blocks
// travel side by side; where they leave through one port the network takes them in turn, and what is
// saved is the waits between the pairwise steps. Exchange e of the one step is pairwise's step e.
#include "shardwise/comm/algorithms/pairwise.hpp"

namespace shardwise::algorithms::direct {

[[nodiscard]] constexpr int steps(int ranks) noexcept { return ranks > 1 ? 1 : 0; }
[[nodiscard]] constexpr int exchanges_per_step(int ranks) noexcept { return pairwise::steps(ranks); }

template <class Size>
[[nodiscard]] constexpr rank_exchange<Size> all_to_all(int ranks, int rank, int exchange, Size whole) noexcept {
  return pairwise::all_to_all(ranks, rank, exchange, whole);
}

}  // namespace shardwise::algorithms::direct
