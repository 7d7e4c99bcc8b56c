#pragma once
// One collective run by one algorithm: how many steps, and every rank's exchange in each. The data
// path (collectives.hpp) and the simulator (sim/schedule.hpp) both read the algorithms through it.
#include "shardwise/comm/algorithms/algorithm.hpp"
#include "shardwise/comm/algorithms/binomial.hpp"
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
// ranks, where); all_to_all_v has no fixed pattern (its blocks come from the counts: pairwise.hpp).
template <class Size>
struct pattern {
  collective kind = collective::barrier;
  algorithm chosen = algorithm::dissemination;
  int ranks = 1;
  Size whole{};
  int root = 0;
  int segments = 1;   // of the pipelined chain
  placement where{};  // of the ranks in nodes, for the hierarchical algorithm

  [[nodiscard]] constexpr int steps() const noexcept {
    if (ranks <= 1) return 0;
    switch (kind) {
      case collective::all_reduce:
        return chosen == algorithm::ring                 ? ring::all_reduce_steps(ranks)
               : chosen == algorithm::recursive_doubling ? recursive_doubling::all_reduce_steps(ranks)
               : chosen == algorithm::hierarchical       ? hierarchical::all_reduce_steps(ranks, where.ranks_per_node)
                                                         : rabenseifner::all_reduce_steps(ranks);
      case collective::all_gather:
        return chosen == algorithm::ring ? ring::all_gather_steps(ranks) : recursive_doubling::all_gather_steps(ranks);
      case collective::reduce_scatter:
        return chosen == algorithm::ring ? ring::reduce_scatter_steps(ranks)
                                         : recursive_doubling::reduce_scatter_steps(ranks);
      case collective::all_to_all: return pairwise::steps(ranks);
      case collective::broadcast:
        return chosen == algorithm::pipelined ? pipelined_chain::steps(ranks, segments) : binomial::steps(ranks);
      case collective::reduce: return binomial::steps(ranks);
      case collective::barrier: return dissemination::steps(ranks);
      case collective::all_to_all_v: break;
    }
    return 0;
  }

  [[nodiscard]] constexpr rank_exchange<Size> exchange(int rank, int step) const noexcept {
    switch (kind) {
      case collective::all_reduce:
        return chosen == algorithm::ring                 ? ring::all_reduce(ranks, rank, step, whole)
               : chosen == algorithm::recursive_doubling ? recursive_doubling::all_reduce(ranks, rank, step, whole)
               : chosen == algorithm::hierarchical       ? hierarchical::all_reduce(ranks, rank, step, whole, where)
                                                         : rabenseifner::all_reduce(ranks, rank, step, whole);
      case collective::all_gather:
        return chosen == algorithm::ring ? ring::all_gather(ranks, rank, step, whole)
                                         : recursive_doubling::all_gather(ranks, rank, step, whole);
      case collective::reduce_scatter:
        return chosen == algorithm::ring ? ring::reduce_scatter(ranks, rank, step, whole)
                                         : recursive_doubling::reduce_scatter(ranks, rank, step, whole);
      case collective::all_to_all: return pairwise::all_to_all(ranks, rank, step, whole);
      case collective::broadcast:
        return chosen == algorithm::pipelined ? pipelined_chain::broadcast(ranks, rank, step, whole, root, segments)
                                              : binomial::broadcast(ranks, rank, step, whole, root);
      case collective::reduce: return binomial::reduce(ranks, rank, step, whole, root);
      case collective::barrier: return dissemination::barrier<Size>(ranks, rank, step);
      case collective::all_to_all_v: break;
    }
    return {};
  }
};

}  // namespace shardwise::algorithms
