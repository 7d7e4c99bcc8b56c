#pragma once
// Hierarchical all-reduce, for ranks in nodes of k (rank r = node·k + local, P a multiple of k): a ring
// reduce-scatter of the whole buffer among the k ranks of each node, which leaves part `local` (1/k of
// the buffer) of the node's sum on each; a ring all-reduce of that part among the P/k ranks with the
// same local index, one per node; then a ring all-gather of the parts inside each node. Between nodes
// each rank moves only its 1/k part, in 2(P/k−1) steps rather than the flat ring's 2(P−1).
//
// With α_in, β_in inside a node and α_out, β_out between nodes, when the k ranks of a node cross
// through c NICs (k/c messages of n/P bytes on each NIC at once), the time is
//   2(k−1)(α_in + n/k·β_in) + (k−1)/k·nγ + 2(P/k−1)(α_out + (k/c)·n/P·β_out) + (P/k−1)/P·nγ.
// A flat ring on the same nodes crosses once per node in each of its 2(P−1) steps; with one NIC per
// node (c = 1) it sends 2(P−1)/P·n through each NIC against 2(P/k−1)/(P/k)·n here, so hierarchical
// saves bandwidth when β_out/β_in > P/k, and latency when α_in ≤ α_out.
//
// All-gather and reduce-scatter have no hierarchical rule here: the blocks a rank would hold after
// the step across nodes are its node's strided ones, not the contiguous block rank r of the result.
#include "shardwise/comm/algorithms/algorithm.hpp"
#include "shardwise/comm/algorithms/ring.hpp"

namespace shardwise::algorithms::hierarchical {

[[nodiscard]] constexpr int all_reduce_steps(int ranks, int ranks_per_node) noexcept {
  return ring::reduce_scatter_steps(ranks_per_node) + ring::all_reduce_steps(ranks / ranks_per_node) +
         ring::all_gather_steps(ranks_per_node);
}

// An exchange of an algorithm run by a subgroup, in the world's terms: subgroup member m is rank
// first + m·stride, and the subgroup's buffer starts at `offset` of the whole.
template <class Size>
[[nodiscard]] constexpr rank_exchange<Size> in_world(const rank_exchange<Size>& e, int first, int stride,
                                                     Size offset) noexcept {
  const auto rank_of = [&](int member) { return member < 0 ? -1 : first + member * stride; };
  return {rank_of(e.send_to),
          {offset + e.sent.offset, e.sent.count},
          rank_of(e.receive_from),
          {offset + e.received.offset, e.received.count},
          e.reduce};
}

template <class Size>
[[nodiscard]] constexpr rank_exchange<Size> all_reduce(int ranks, int rank, int step, Size whole,
                                                       placement where) noexcept {
  const int k = where.ranks_per_node;
  const int nodes = ranks / k;
  const int node = rank / k;
  const int local = rank % k;
  const int inside = ring::reduce_scatter_steps(k);
  const int across = ring::all_reduce_steps(nodes);
  if (step < inside) return in_world(ring::reduce_scatter(k, local, step, whole), node * k, 1, Size{});
  if (step < inside + across) {
    const part<Size> mine = part_of(whole, k, local);
    return in_world(ring::all_reduce(nodes, node, step - inside, mine.count), local, k, mine.offset);
  }
  return in_world(ring::all_gather(k, local, step - inside - across, whole), node * k, 1, Size{});
}

}  // namespace shardwise::algorithms::hierarchical
