#pragma once
// The collective algorithms, each written once as the rule of its steps: at step k, what rank r of P
// sends to whom and what it receives from whom, and whether it reduces what arrives into its own
// data or copies it. The same rule moves data on any communicator (comm/algorithms/collectives.hpp,
// with element counts) and times the collective in the simulator (sim/schedule.hpp, with byte counts).
//
// An algorithm works on one buffer, `whole` elements or bytes long, cut into parts: the P blocks of
// all-gather, reduce-scatter, all-to-all and the ring all-reduce, the halves and quarters of recursive
// halving, the segments of a pipelined broadcast. A part's place and length are computed from `whole`
// in the size type: std::size_t gives element ranges (parts differ by at most one element when P does
// not divide the length), double gives the exact fractions of the α-β formulas below.
//
// With P ranks, latency α, time per byte β, reduction time per byte γ, message n bytes (the whole
// vector for all-reduce, reduce and broadcast; one rank's block b for all-gather, reduce-scatter and
// all-to-all), and no two transfers on one link, when every step waits for its slowest exchange:
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
//   binomial broadcast             ⌈log P⌉·(α + nβ)
//   pipelined (chain) broadcast    (P+s-2)·(α + (n/s)β) with s segments
//   binomial reduce                ⌈log P⌉·(α + nβ + nγ)
//   dissemination barrier          ⌈log P⌉·α
//   hierarchical all-reduce        2(k-1)(α_in + n/k·β_in) + 2(P/k-1)(α_out + n/P·β_out)
//                                  + (k-1)/k·nγ + (P/k-1)/P·nγ   (nodes of k ranks; hierarchical.hpp
//                                  gives β_out's factor when a node's ranks share NICs)
//
// One header per algorithm: ring.hpp, recursive_doubling.hpp (and folding.hpp, for P not a power of
// two), rabenseifner.hpp, pairwise.hpp, binomial.hpp, pipelined_chain.hpp, dissemination.hpp,
// hierarchical.hpp; pattern.hpp picks one for a collective.
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
  constexpr std::string_view names[] = {"automatic", "ring",      "recursive doubling", "Rabenseifner", "pairwise",
                                        "binomial",  "pipelined", "dissemination",      "hierarchical"};
  return names[static_cast<int>(a)];
}

// Where the ranks sit: rank r is local rank r mod ranks_per_node of node r / ranks_per_node. Only the
// hierarchical algorithm reads it.
struct placement {
  int ranks_per_node = 1;
};

// Whether `a` is an algorithm for `kind` on `ranks` ranks placed as `where` says.
[[nodiscard]] constexpr bool applies(collective kind, algorithm a, int ranks, placement where = {}) noexcept {
  const bool power_of_two = ranks > 0 && std::has_single_bit(static_cast<unsigned>(ranks));
  switch (kind) {
    case collective::all_reduce:
      return a == algorithm::ring || a == algorithm::recursive_doubling || a == algorithm::rabenseifner ||
             (a == algorithm::hierarchical && where.ranks_per_node >= 1 && ranks % where.ranks_per_node == 0);
    case collective::all_gather:
    case collective::reduce_scatter:
      return a == algorithm::ring || (a == algorithm::recursive_doubling && power_of_two);
    case collective::all_to_all:
    case collective::all_to_all_v: return a == algorithm::pairwise;
    case collective::broadcast: return a == algorithm::binomial || a == algorithm::pipelined;
    case collective::reduce: return a == algorithm::binomial;
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

// r mod P in [0, P) for any integer r.
[[nodiscard]] constexpr int modulo(int r, int ranks) noexcept { return ((r % ranks) + ranks) % ranks; }

[[nodiscard]] constexpr int ceil_log2(int p) noexcept {
  return p <= 1 ? 0 : static_cast<int>(std::bit_width(static_cast<unsigned>(p - 1)));
}

}  // namespace algorithms
}  // namespace shardwise
