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
// Across first: the same three phases with the two kinds of ring swapped (a reduce-scatter among the
// ranks of equal local index, the all-reduce inside each node, the all-gather among the first again).
// Between nodes it moves more, so on nodes it is slower; on a torus, whose rows count as its nodes, it
// runs down the columns first, and a channel that does (pattern.hpp) keeps the links of the other
// dimension busy while another channel runs along the rows.
//
// All-gather and reduce-scatter have no hierarchical rule here: the blocks a rank would hold after
// the step across nodes are its node's strided ones, not the contiguous block rank r of the result.
// Where a node's ranks have a NIC each, rings rotated inside the nodes (pattern.hpp) spread them
// across the NICs instead.
#include <utility>

#include "shardwise/comm/algorithms/algorithm.hpp"
#include "shardwise/comm/algorithms/ring.hpp"

namespace shardwise::algorithms::hierarchical {

// The rings a rank takes part in, one of each kind: `size` members, this rank member `member`,
// member m being rank first + m·stride.
struct ring_of {
  int size = 1;
  int member = 0;
  int first = 0;
  int stride = 1;
};

// The ring of the first and last phases, then the ring of the middle one.
[[nodiscard]] constexpr std::pair<ring_of, ring_of> rings(int ranks, int rank, placement where,
                                                          bool across_first) noexcept {
  const int k = where.ranks_per_node;
  const ring_of inside{k, rank % k, rank / k * k, 1};
  const ring_of across{ranks / k, rank / k, rank % k, k};
  return across_first ? std::pair{across, inside} : std::pair{inside, across};
}

[[nodiscard]] constexpr int all_reduce_steps(int ranks, int ranks_per_node, bool across_first = false) noexcept {
  const auto [outer, middle] = rings(ranks, 0, {ranks_per_node}, across_first);
  return ring::reduce_scatter_steps(outer.size) + ring::all_reduce_steps(middle.size) +
         ring::all_gather_steps(outer.size);
}

// Every ring runs in `direction` (ring.hpp).
template <class Size>
[[nodiscard]] constexpr rank_exchange<Size> all_reduce(int ranks, int rank, int step, Size whole, placement where,
                                                       int direction = 1, bool across_first = false) noexcept {
  const auto [outer, middle] = rings(ranks, rank, where, across_first);
  const int first_phase = ring::reduce_scatter_steps(outer.size);
  const int second_phase = ring::all_reduce_steps(middle.size);
  if (step < first_phase)
    return in_world(ring::reduce_scatter(outer.size, outer.member, step, whole, direction), outer.first, outer.stride,
                    Size{});
  if (step < first_phase + second_phase) {
    const part<Size> mine = part_of(whole, outer.size, outer.member);
    return in_world(ring::all_reduce(middle.size, middle.member, step - first_phase, mine.count, direction),
                    middle.first, middle.stride, mine.offset);
  }
  return in_world(ring::all_gather(outer.size, outer.member, step - first_phase - second_phase, whole, direction),
                  outer.first, outer.stride, Size{});
}

}  // namespace shardwise::algorithms::hierarchical
