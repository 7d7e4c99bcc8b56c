#pragma once
// The steps of a collective as the cost model plays them, read from the algorithm's own description
// (comm/algorithms/, whose header comment gives each one's α-β formula): in a step every rank's
// exchange happens at once, and the next step starts when the slowest one (and any reduction of
// received data) is done — the bulk-synchronous reading under which those formulas hold. Consecutive
// steps that are alike (the same transfers, the same bytes) are kept once with a repeat count, so a
// ring on 1024 ranks is two steps to play, not 2046.
//
// Ranks here are ranks of the communicator; the cost model maps them to devices.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "shardwise/comm/algorithms/pattern.hpp"

namespace shardwise::sim {

using shardwise::algorithm;
using shardwise::collective;
using shardwise::name_of;
using shardwise::placement;

// The slices NCCL (and RCCL, its fork) pipelines a ring broadcast or reduce in: its Simple protocol's
// 4 MiB of buffer a channel in NCCL_STEPS = 8 steps (src/init.cc DEFAULT_BUFFSIZE,
// src/include/devcomm.h), one step a slice (BROADCAST_SLICESTEPS = REDUCE_SLICESTEPS = 1,
// src/include/collectives.h). The pipelined chain's segments, unless the machine model says otherwise
// (algorithm_choice::pipeline_segment_bytes).
inline constexpr double nccl_broadcast_slice_bytes = 512 * 1024;

// One collective call as the cost model sees it: which, how big, from where.
struct collective_shape {
  collective kind = collective::barrier;
  double bytes = 0;  // n, or one rank's block b (see comm/algorithms/algorithm.hpp)
  int root = 0;
  friend bool operator==(const collective_shape&, const collective_shape&) = default;
};

struct exchange {
  int source = 0;
  int destination = 0;
  double bytes = 0;
  friend bool operator==(const exchange&, const exchange&) = default;
};

struct step {
  std::vector<exchange> exchanges;
  double reduced_bytes = 0;  // reduced by each receiving rank after the exchanges
  std::int64_t repeat = 1;   // the same step this many times in a row
};

namespace detail {

// Every step on its own: no run of steps is known to be alike.
struct one_step_at_a_time {
  [[nodiscard]] constexpr int operator()(int step) const noexcept { return step + 1; }
};

// Steps [0, count) of `exchange_of(rank, step, e)` (an algorithms::rank_exchange<double>) on `ranks`
// ranks making `per_step` exchanges each a step (one per channel, or per peer), alike neighbours merged.
// A rank reduces what all its exchanges received. `alike_until(k)` is the end of the run of steps
// known to be alike with step k, of which only step k is evaluated (pattern::alike_until): a ring on
// 2048 ranks in 16 channels is evaluated twice, not for each of its 4094 steps.
template <class ExchangeOf, class AlikeUntil = one_step_at_a_time>
std::vector<step> steps_of(int ranks, int count, int per_step, const ExchangeOf& exchange_of,
                           const AlikeUntil& alike_until = {}) {
  std::vector<step> steps;
  step next;
  for (int k = 0; k < count;) {
    next.exchanges.clear();
    next.reduced_bytes = 0;
    for (int r = 0; r < ranks; ++r) {
      double reduced = 0;
      for (int c = 0; c < per_step; ++c) {
        const auto e = exchange_of(r, k, c);
        if (e.send_to >= 0) next.exchanges.push_back({r, e.send_to, e.sent.count});
        if (e.receive_from >= 0 && e.reduce) reduced += e.received.count;
      }
      next.reduced_bytes = std::max(next.reduced_bytes, reduced);
    }
    const int end = std::min(count, std::max(k + 1, alike_until(k)));
    if (!steps.empty() && steps.back().exchanges == next.exchanges &&
        steps.back().reduced_bytes == next.reduced_bytes) {
      steps.back().repeat += end - k;
    } else {
      next.repeat = end - k;
      steps.push_back(next);
    }
    k = end;
  }
  return steps;
}

// `a` (not automatic) in `channels` for `shape` on `ranks` ranks placed as `where` says: the rule
// schedule() reads.
inline algorithms::pattern<double> pattern_of(algorithm a, const collective_shape& shape, int ranks,
                                              double pipeline_segment_bytes, placement where, int channels) {
  const bool per_rank_blocks = shape.kind == collective::all_gather || shape.kind == collective::reduce_scatter ||
                               shape.kind == collective::all_to_all;
  return {shape.kind, a,
          ranks,      per_rank_blocks ? shape.bytes * ranks : shape.bytes,
          shape.root, algorithms::pipelined_chain::segments(a, shape.bytes, pipeline_segment_bytes),
          where,      channels};
}

}  // namespace detail

// The steps of `a` (not automatic) in `channels` for `shape` on `ranks` ranks placed in nodes as
// `where` says (read by the hierarchical algorithm only). The caller has checked that they fit
// (algorithm_choice::pick, applies).
inline std::vector<step> schedule(algorithm a, const collective_shape& shape, int ranks,
                                  double pipeline_segment_bytes = nccl_broadcast_slice_bytes, placement where = {},
                                  int channels = 1) {
  if (ranks <= 1 || shape.kind == collective::all_to_all_v) return {};  // all_to_all_v: uneven_all_to_all_steps
  const auto pattern = detail::pattern_of(a, shape, ranks, pipeline_segment_bytes, where, channels);
  return detail::steps_of(
      ranks, pattern.steps(), pattern.exchanges_per_step(),
      [&](int r, int k, int c) { return pattern.exchange(r, k, c); }, [&](int k) { return pattern.alike_until(k); });
}

// An all-to-all of uneven blocks, bytes[s][d] from rank s to rank d, by `a` (pairwise or direct): the
// even pattern's exchanges with each block's own size.
inline std::vector<step> uneven_all_to_all_steps(algorithm a, const std::vector<std::vector<double>>& bytes) {
  const int P = static_cast<int>(bytes.size());
  const algorithms::pattern<double> even{collective::all_to_all, a, P, 0.0};
  return detail::steps_of(P, even.steps(), even.exchanges_per_step(), [&](int r, int k, int c) {
    auto e = even.exchange(r, k, c);
    e.sent.count = bytes[static_cast<std::size_t>(r)][static_cast<std::size_t>(e.send_to)];
    e.receive_from = -1;
    return e;
  });
}

}  // namespace shardwise::sim
