#pragma once
// The collective algorithms, each written once as the rule of its steps: at step k, what rank r of P
// sends to whom and what it receives from whom, and whether it reduces what arrives into its own
// data or copies it. The same rule moves data on any communicator (comm/algorithms/collectives.hpp,
// with element counts) and times the collective in the simulator (sim/schedule.hpp, with byte counts).
//
// An algorithm works on one buffer, `whole` elements or bytes long, cut into parts: the P blocks of
// all-gather, reduce-scatter, all-to-all and the ring all-reduce, the halves and quarters of recursive
// halving, the segments of a pipelined chain. A part's place and length are computed from `whole`
// in the size type: std::size_t gives element ranges (parts differ by at most one element when P does
// not divide the length), double gives the exact fractions of the α-β formulas below.
//
// With P ranks, latency α, time per byte β, reduction time per byte γ, message n bytes (the whole
// vector for all-reduce, reduce and broadcast; one rank's block b for all-gather, reduce-scatter and
// all-to-all), and no two transfers on one link, when every step waits for its slowest exchange and
// reduces what arrived after it (the simulator overlaps the two in segments: sim/collective_cost.hpp):
//
//   ring all-gather                (P-1)·(α + bβ)
//   ring reduce-scatter            (P-1)·(α + bβ + bγ)
//   ring all-reduce                2(P-1)·α + 2(P-1)/P·nβ + (P-1)/P·nγ
//   recursive-doubling all-gather  log P·α + (P-1)·bβ                       (P a power of two)
//   recursive-halving red.-scatter log P·α + (P-1)·b(β + γ)                 (P a power of two)
//   recursive-doubling all-reduce  log P·(α + nβ + nγ)                      (+2 folding steps of n
//   Rabenseifner all-reduce        2 log P·α + 2(P-1)/P·nβ + (P-1)/P·nγ      bytes when P is not a
//                                                                            power of two)
//   pairwise all-to-all            (P-1)·(α + bβ)     (step k: r sends to r+k, receives from r-k)
//   direct all-to-all              α + bβ with a link per pair of ranks; α + (P-1)·bβ through one port
//   binomial broadcast             ⌈log P⌉·(α + nβ)
//   pipelined (chain) broadcast    (P+s-2)·(α + (n/s)β) with s segments
//   binomial reduce                ⌈log P⌉·(α + nβ + nγ)
//   pipelined (chain) reduce       (P+s-2)·(α + (n/s)(β + γ)) with s segments
//   dissemination barrier          ⌈log P⌉·α
//   hierarchical all-reduce        2(k-1)(α_in + n/k·β_in) + 2(P/k-1)(α_out + n/P·β_out)
//                                  + (k-1)/k·nγ + (P/k-1)/P·nγ   (nodes of k ranks; hierarchical.hpp
//                                  gives β_out's factor when a node's ranks share NICs)
//
// Channels: the rings (all-reduce, all-gather, reduce-scatter) and the hierarchical all-reduce can
// split their data among C rings run at once, as NCCL's channels do; odd channels go round the other
// way, and the hierarchical all-reduce's channels 2 and 3 go across nodes first. On full-duplex links
// two channels use both directions of every link of the ring: the ring all-reduce's β and γ terms
// halve, its α terms stay; where a rank's messages of both directions share one link (a switch
// port, a NIC), nothing is gained (pattern.hpp). A ring leaves each node of k ranks from one rank, so
// across nodes with a NIC per rank it uses 2 of the node's k NICs; in C > 2 channels its pairs of
// channels rotate their order inside the node, so that it leaves from min(C, k) ranks, and the time
// across nodes of a ring reduce-scatter or all-gather falls to (P-1)·b·β_NIC/min(C, k).
//
// One header per algorithm: ring.hpp, recursive_doubling.hpp (and folding.hpp, for P not a power of
// two), rabenseifner.hpp, pairwise.hpp, direct.hpp, binomial.hpp, pipelined_chain.hpp, dissemination.hpp,
// hierarchical.hpp; pattern.hpp picks one for a collective.
#include <algorithm>
#include <bit>
#include <concepts>
#include <cstddef>
#include <string_view>

namespace shardwise {

enum class collective { all_reduce, reduce, reduce_scatter, all_gather, all_to_all, all_to_all_v, broadcast, barrier };

enum class algorithm {
  automatic,  // let the simulator's algorithm_choice decide (sim/algorithm_choice.hpp)
  ring,
  recursive_doubling,  // recursive halving for reduce-scatter
  rabenseifner,
  pairwise,
  direct,  // all-to-all: every block sent at once
  binomial,
  pipelined,
  dissemination,
  hierarchical,  // inside each node, then across nodes, then inside again (placement::ranks_per_node)
};

[[nodiscard]] constexpr std::string_view name_of(collective c) noexcept {
  constexpr std::string_view names[] = {"all_reduce", "reduce",       "reduce_scatter", "all_gather",
                                        "all_to_all", "all_to_all_v", "broadcast",      "barrier"};
  return names[static_cast<int>(c)];
}
[[nodiscard]] constexpr std::string_view name_of(algorithm a) noexcept {
  constexpr std::string_view names[] = {"automatic", "ring",     "recursive doubling", "Rabenseifner",  "pairwise",
                                        "direct",    "binomial", "pipelined",          "dissemination", "hierarchical"};
  return names[static_cast<int>(a)];
}

// Where the ranks sit: rank r is local rank r mod ranks_per_node of node r / ranks_per_node. The
// hierarchical algorithm reads it, and so do rings in more than 2 channels, which rotate their order
// inside each node (ring.hpp).
struct placement {
  int ranks_per_node = 1;
};

// How many channels `a` can split a collective among, its ranks placed as `where` says: 1 for every
// algorithm but two. The hierarchical all-reduce takes 4, its channels 2 and 3 going across nodes
// first. The ring takes 2, one each way; in nodes of k, 2·k (k rounded down to a power of two, at most
// 8), each pair of channels leaving every node from another rank, so that on a network with a NIC per
// rank every NIC carries a ring, as NCCL's channels do. 16 covers nodes of 8 and bounds the search.
[[nodiscard]] constexpr int most_channels(algorithm a, placement where = {}) noexcept {
  if (a == algorithm::hierarchical) return 4;
  if (a != algorithm::ring) return 1;
  const auto per_node = static_cast<unsigned>(std::clamp(where.ranks_per_node, 1, 8));
  return 2 * static_cast<int>(std::bit_floor(per_node));
}

// Whether `a`, split among `channels`, is an algorithm for `kind` on `ranks` ranks placed as `where`
// says.
[[nodiscard]] constexpr bool applies(collective kind, algorithm a, int ranks, placement where = {},
                                     int channels = 1) noexcept {
  const bool power_of_two = ranks > 0 && std::has_single_bit(static_cast<unsigned>(ranks));
  if (channels != 1 &&
      (channels < 1 || channels > most_channels(a, where) || !std::has_single_bit(static_cast<unsigned>(channels)) ||
       (channels > 2 && ranks % where.ranks_per_node != 0)))
    return false;
  switch (kind) {
    case collective::all_reduce:
      return a == algorithm::ring || a == algorithm::recursive_doubling || a == algorithm::rabenseifner ||
             (a == algorithm::hierarchical && where.ranks_per_node >= 1 && ranks % where.ranks_per_node == 0);
    case collective::all_gather:
    case collective::reduce_scatter:
      return a == algorithm::ring || (a == algorithm::recursive_doubling && power_of_two);
    case collective::all_to_all:
    case collective::all_to_all_v: return a == algorithm::pairwise || a == algorithm::direct;
    case collective::broadcast:
    case collective::reduce: return a == algorithm::binomial || a == algorithm::pipelined;
    case collective::barrier: return a == algorithm::dissemination;
  }
  return false;
}

namespace algorithms {

// A stretch of the buffer: `count` elements (or bytes) from `offset`.
template <class Size>
struct part {
  Size offset{};
  Size count{};
};

// What one rank does in one step: send `sent` to rank `send_to` and receive `received` from rank
// `receive_from` (-1: no such message), then reduce what arrived into its own data or keep it as is.
template <class Size>
struct rank_exchange {
  int send_to = -1;
  part<Size> sent{};
  int receive_from = -1;
  part<Size> received{};
  bool reduce = false;
};

// Parts [first, last) of `whole` cut into `parts`; with integer sizes part i starts at ⌊i·whole/parts⌋,
// so lengths differ by at most one.
template <class Size>
[[nodiscard]] constexpr part<Size> parts_of(Size whole, int parts, int first, int last) noexcept {
  if constexpr (std::floating_point<Size>) {
    return {whole * first / parts, whole * (last - first) / parts};
  } else {
    const auto start = [&](int i) {
      return static_cast<Size>(whole * static_cast<Size>(i) / static_cast<Size>(parts));
    };
    return {start(first), start(last) - start(first)};
  }
}
template <class Size>
[[nodiscard]] constexpr part<Size> part_of(Size whole, int parts, int index) noexcept {
  return parts_of(whole, parts, index, index + 1);
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

// r mod P in [0, P) for any integer r.
[[nodiscard]] constexpr int modulo(int r, int ranks) noexcept { return ((r % ranks) + ranks) % ranks; }

[[nodiscard]] constexpr int ceil_log2(int p) noexcept {
  return p <= 1 ? 0 : static_cast<int>(std::bit_width(static_cast<unsigned>(p - 1)));
}

}  // namespace algorithms
}  // namespace shardwise
