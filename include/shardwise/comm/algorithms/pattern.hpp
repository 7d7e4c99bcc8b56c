#pragma once
// One collective run by one algorithm: how many steps, and every rank's exchange in each. The data
// path (collectives.hpp) and the simulator (sim/schedule.hpp) both read the algorithms through it.
#include <algorithm>
#include <concepts>

#include "shardwise/comm/algorithms/algorithm.hpp"
#include "shardwise/comm/algorithms/binomial.hpp"
#include "shardwise/comm/algorithms/direct.hpp"
#include "shardwise/comm/algorithms/dissemination.hpp"
#include "shardwise/comm/algorithms/hierarchical.hpp"
#include "shardwise/comm/algorithms/pairwise.hpp"
#include "shardwise/comm/algorithms/pipelined_chain.hpp"
#include "shardwise/comm/algorithms/rabenseifner.hpp"
#include "shardwise/comm/algorithms/recursive_doubling.hpp"
#include "shardwise/comm/algorithms/ring.hpp"

namespace shardwise::algorithms {

// `whole` is the buffer the algorithm works on: the vector of all-reduce, reduce and broadcast; all P
// blocks of all-gather, reduce-scatter and all-to-all. The caller has checked applies(kind, chosen,
// ranks, where, channels); all_to_all_v has no fixed pattern (its blocks come from the counts:
// pairwise.hpp).
//
// Channels split the collective among rings run at once (algorithm.hpp): channel c of an all-reduce
// reduces piece c of the buffer; of an all-gather or reduce-scatter, it moves piece c of every block.
// Odd channels run their rings the other way; channels 2 and 3 of the hierarchical all-reduce go
// across nodes first. Rings in C > 2 channels, in nodes of k, rotate their order inside each node:
// channels 2j and 2j+1 start each node's stretch of the ring at its local rank j·s, s = 2k/C (at
// least 1). A ring each way of one rotation leaves the node from the rank before it and from it, and
// enters it at it and at the rank before, so with s ≥ 2 no two channels leave a node, or enter it,
// from one rank; with s = 1 every rank carries two. In a step each rank makes one exchange per
// channel, or, in the direct all-to-all, one per other rank (exchanges_per_step).
template <class Size>
struct pattern {
  collective kind = collective::barrier;
  algorithm chosen = algorithm::dissemination;
  int ranks = 1;
  Size whole{};
  int root = 0;
  int segments = 1;   // of the pipelined chain
  placement where{};  // of the ranks in nodes, for the hierarchical algorithm and rotated rings
  int channels = 1;

  [[nodiscard]] constexpr int steps() const noexcept {
    if (ranks <= 1) return 0;
    if (chosen == algorithm::direct) return direct::steps(ranks);
    if (chosen == algorithm::hierarchical && channels > 2)
      return std::max(hierarchical::all_reduce_steps(ranks, where.ranks_per_node, false),
                      hierarchical::all_reduce_steps(ranks, where.ranks_per_node, true));
    return channel_steps(false);
  }

  // The end of the run of steps that are alike with step `step` (the same exchanges, of the same
  // sizes), so that a reader of byte counts evaluates one step of the run: a ring's steps each move one
  // part of every block, which with sizes in exact fractions (a floating-point Size) are all alike, so
  // the P − 1 steps of a ring reduce-scatter or all-gather are one run and a ring all-reduce's two
  // halves are two. Other steps are taken one at a time.
  [[nodiscard]] constexpr int alike_until(int step) const noexcept {
    if constexpr (std::floating_point<Size>) {
      if (chosen == algorithm::ring && (kind == collective::all_gather || kind == collective::reduce_scatter))
        return steps();
      if (chosen == algorithm::ring && kind == collective::all_reduce)
        return step < ring::reduce_scatter_steps(ranks) ? ring::reduce_scatter_steps(ranks) : steps();
    }
    return step + 1;
  }

  [[nodiscard]] constexpr int exchanges_per_step() const noexcept {
    return chosen == algorithm::direct ? direct::exchanges_per_step(ranks) : channels;
  }

  // Rank `rank`'s exchange `channel` (< exchanges_per_step()) at step `step` (send_to and receive_from
  // -1 when the channel has finished).
  [[nodiscard]] constexpr rank_exchange<Size> exchange(int rank, int step, int channel = 0) const noexcept {
    if (chosen == algorithm::direct) return direct::all_to_all(ranks, rank, channel, whole);
    if (channels == 1) return one_channel(rank, step, whole, 1, false);
    const int direction = channel % 2 == 0 ? 1 : -1;
    const bool across_first = chosen == algorithm::hierarchical && channel >= 2;
    if (step >= channel_steps(across_first)) return {};
    if (kind == collective::all_reduce) {
      const part<Size> piece = part_of(whole, channels, channel);
      return in_world(one_channel(rank, step, piece.count, direction, across_first, ring_order(channel)), 0, 1,
                      piece.offset);
    }
    auto e = one_channel(rank, step, whole, direction, across_first, ring_order(channel));
    e.sent = piece_of(e.sent, channel);
    e.received = piece_of(e.received, channel);
    return e;
  }

 private:
  [[nodiscard]] constexpr part<Size> piece_of(part<Size> block, int channel) const noexcept {
    const part<Size> piece = part_of(block.count, channels, channel);
    return {block.offset + piece.offset, piece.count};
  }

  [[nodiscard]] constexpr int channel_steps(bool across_first) const noexcept {
    switch (kind) {
      case collective::all_reduce:
        return chosen == algorithm::ring                 ? ring::all_reduce_steps(ranks)
               : chosen == algorithm::recursive_doubling ? recursive_doubling::all_reduce_steps(ranks)
               : chosen == algorithm::hierarchical
                   ? hierarchical::all_reduce_steps(ranks, where.ranks_per_node, across_first)
                   : rabenseifner::all_reduce_steps(ranks);
      case collective::all_gather:
        return chosen == algorithm::ring ? ring::all_gather_steps(ranks) : recursive_doubling::all_gather_steps(ranks);
      case collective::reduce_scatter:
        return chosen == algorithm::ring ? ring::reduce_scatter_steps(ranks)
                                         : recursive_doubling::reduce_scatter_steps(ranks);
      case collective::all_to_all: return pairwise::steps(ranks);
      case collective::broadcast:
      case collective::reduce:
        return chosen == algorithm::pipelined ? pipelined_chain::steps(ranks, segments) : binomial::steps(ranks);
      case collective::barrier: return dissemination::steps(ranks);
      case collective::all_to_all_v: break;
    }
    return 0;
  }

  // The order of channel `channel`'s ring: the ranks' own, or in more than 2 channels rotated inside
  // the nodes (which applies() has checked divide the ranks).
  [[nodiscard]] constexpr ring::order ring_order(int channel) const noexcept {
    if (chosen != algorithm::ring || channels <= 2) return {};
    const int k = where.ranks_per_node;
    return {k, channel / 2 * std::max(1, 2 * k / channels) % k};
  }

  // The algorithm on `data` (the whole, or an all-reduce channel's piece), its rings in `direction`
  // and in order `o`.
  [[nodiscard]] constexpr rank_exchange<Size> one_channel(int rank, int step, Size data, int direction,
                                                          bool across_first, ring::order o = {}) const noexcept {
    switch (kind) {
      case collective::all_reduce:
        return chosen == algorithm::ring                 ? ring::all_reduce(ranks, rank, step, data, direction, o)
               : chosen == algorithm::recursive_doubling ? recursive_doubling::all_reduce(ranks, rank, step, data)
               : chosen == algorithm::hierarchical
                   ? hierarchical::all_reduce(ranks, rank, step, data, where, direction, across_first)
                   : rabenseifner::all_reduce(ranks, rank, step, data);
      case collective::all_gather:
        return chosen == algorithm::ring ? ring::all_gather(ranks, rank, step, data, direction, o)
                                         : recursive_doubling::all_gather(ranks, rank, step, data);
      case collective::reduce_scatter:
        return chosen == algorithm::ring ? ring::reduce_scatter(ranks, rank, step, data, direction, o)
                                         : recursive_doubling::reduce_scatter(ranks, rank, step, data);
      case collective::all_to_all: return pairwise::all_to_all(ranks, rank, step, data);
      case collective::broadcast:
        return chosen == algorithm::pipelined ? pipelined_chain::broadcast(ranks, rank, step, data, root, segments)
                                              : binomial::broadcast(ranks, rank, step, data, root);
      case collective::reduce:
        return chosen == algorithm::pipelined ? pipelined_chain::reduce(ranks, rank, step, data, root, segments)
                                              : binomial::reduce(ranks, rank, step, data, root);
      case collective::barrier: return dissemination::barrier<Size>(ranks, rank, step);
      case collective::all_to_all_v: break;
    }
    return {};
  }
};

}  // namespace shardwise::algorithms
