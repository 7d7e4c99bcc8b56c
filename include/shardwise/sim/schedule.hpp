#pragma once
// The collective algorithms the simulator models, each written as its sequence of steps: in a step
// every listed exchange happens at once, and the next step starts when the slowest one (and any
// reduction of received data) is done — the bulk-synchronous reading under which the classic α-β
// formulas hold. With P ranks, latency α, time per byte β, reduction time per byte γ, message n bytes
// (the whole vector for all-reduce, reduce and broadcast; one rank's block b for all-gather,
// reduce-scatter and all-to-all), and no two transfers on one link:
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
//
// Ranks here are ranks of the communicator; the cost model maps them to devices.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <string_view>
#include <vector>

namespace shardwise::sim {

enum class collective { all_reduce, reduce, reduce_scatter, all_gather, all_to_all, all_to_all_v, broadcast, barrier };

enum class algorithm {
  automatic,  // let algorithm_choice decide (sim/algorithm_choice.hpp)
  ring,
  recursive_doubling,  // recursive halving for reduce-scatter
  rabenseifner,
  pairwise,
  binomial,
  pipelined,
  dissemination,
};

[[nodiscard]] constexpr std::string_view name_of(collective c) noexcept {
  constexpr std::string_view names[] = {"all_reduce", "reduce",       "reduce_scatter", "all_gather",
                                        "all_to_all", "all_to_all_v", "broadcast",      "barrier"};
  return names[static_cast<int>(c)];
}
[[nodiscard]] constexpr std::string_view name_of(algorithm a) noexcept {
  constexpr std::string_view names[] = {"automatic", "ring",     "recursive doubling", "Rabenseifner",
                                        "pairwise",  "binomial", "pipelined",          "dissemination"};
  return names[static_cast<int>(a)];
}

// One collective call as the cost model sees it: which, how big, from where.
struct collective_shape {
  collective kind = collective::barrier;
  double bytes = 0;  // n or b, as in the table above
  int root = 0;
  friend bool operator==(const collective_shape&, const collective_shape&) = default;
};

struct exchange {
  int source = 0;
  int destination = 0;
  double bytes = 0;
};

struct step {
  std::vector<exchange> exchanges;
  double reduced_bytes = 0;  // reduced by each receiving rank after the exchanges
  std::int64_t repeat = 1;   // the same step this many times in a row
};

namespace detail {

inline int ceil_log2(int p) { return p <= 1 ? 0 : static_cast<int>(std::bit_width(static_cast<unsigned>(p - 1))); }

// Every rank r sends `bytes` to (r + distance) mod P.
inline step shift(int ranks, int distance, double bytes, double reduced = 0, std::int64_t repeat = 1) {
  step s{{}, reduced, repeat};
  s.exchanges.reserve(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) s.exchanges.push_back({r, (r + distance) % ranks, bytes});
  return s;
}
// Ranks [0, ranks) exchange with r XOR distance (ranks a power of two).
inline step butterfly(int ranks, int distance, double bytes, double reduced) {
  step s{{}, reduced, 1};
  s.exchanges.reserve(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) s.exchanges.push_back({r, r ^ distance, bytes});
  return s;
}
// The ranks beyond the largest power of two P' fold into ranks [0, P - P') before a recursive
// algorithm (sending n, reduced there) and get the result back after it.
inline step fold(int ranks, int lower, double bytes, bool in) {
  step s{{}, in ? bytes : 0, 1};
  for (int extra = lower; extra < ranks; ++extra)
    s.exchanges.push_back(in ? exchange{extra, extra - lower, bytes} : exchange{extra - lower, extra, bytes});
  return s;
}

inline void recursive_reduce_scatter(std::vector<step>& steps, int ranks, double block) {
  for (int distance = ranks / 2; distance >= 1; distance /= 2)
    steps.push_back(butterfly(ranks, distance, block * distance, block * distance));
}
inline void recursive_all_gather(std::vector<step>& steps, int ranks, double block) {
  for (int distance = 1; distance < ranks; distance *= 2)
    steps.push_back(butterfly(ranks, distance, block * distance, 0));
}

}  // namespace detail

// The steps of `a` (not automatic) for `shape` on `ranks` ranks. The caller has checked that the
// pair fits (algorithm_choice::check).
inline std::vector<step> schedule(algorithm a, const collective_shape& shape, int ranks,
                                  double pipeline_segment_bytes = 1 << 20) {
  std::vector<step> steps;
  if (ranks <= 1) return steps;
  const double n = shape.bytes;
  const int P = ranks;
  const int lower = static_cast<int>(std::bit_floor(static_cast<unsigned>(P)));  // P' for recursive algorithms
  auto relative = [&](int v) { return (v + shape.root) % P; };                   // rank v places after the root
  switch (shape.kind) {
    case collective::all_gather:
      if (a == algorithm::ring) steps.push_back(detail::shift(P, 1, n, 0, P - 1));
      else
        detail::recursive_all_gather(steps, P, n);
      break;
    case collective::reduce_scatter:
      if (a == algorithm::ring) steps.push_back(detail::shift(P, 1, n, n, P - 1));
      else
        detail::recursive_reduce_scatter(steps, P, n);
      break;
    case collective::all_reduce:
      if (a == algorithm::ring) {
        steps.push_back(detail::shift(P, 1, n / P, n / P, P - 1));
        steps.push_back(detail::shift(P, 1, n / P, 0, P - 1));
        break;
      }
      if (lower != P) steps.push_back(detail::fold(P, lower, n, true));
      if (a == algorithm::rabenseifner) {
        detail::recursive_reduce_scatter(steps, lower, n / lower);
        detail::recursive_all_gather(steps, lower, n / lower);
      } else {
        for (int distance = 1; distance < lower; distance *= 2)
          steps.push_back(detail::butterfly(lower, distance, n, n));
      }
      if (lower != P) steps.push_back(detail::fold(P, lower, n, false));
      break;
    case collective::all_to_all:
      for (int k = 1; k < P; ++k) steps.push_back(detail::shift(P, k, n));
      break;
    case collective::broadcast:
    case collective::reduce: {
      if (a == algorithm::pipelined) {
        // A chain root → root+1 → …; segment t crosses link v → v+1 in step t + v.
        const auto segments = static_cast<int>(std::max(1.0, std::ceil(n / pipeline_segment_bytes)));
        const double piece = n / segments;
        for (int t = 0; t < P - 1 + segments - 1; ++t) {
          step s{{}, 0, 1};
          for (int v = 0; v < P - 1; ++v)
            if (t - v >= 0 && t - v < segments) s.exchanges.push_back({relative(v), relative(v + 1), piece});
          if (!steps.empty() && steps.back().exchanges.size() == s.exchanges.size() && t >= P - 1 && t < segments)
            ++steps.back().repeat;  // the full pipeline's steps are all alike
          else
            steps.push_back(std::move(s));
        }
        break;
      }
      const bool reducing = shape.kind == collective::reduce;
      const int rounds = detail::ceil_log2(P);
      for (int k = 0; k < rounds; ++k) {
        // Broadcast: round k doubles the ranks holding the data; reduce runs the rounds backwards.
        const int distance = 1 << (reducing ? rounds - 1 - k : k);
        step s{{}, reducing ? n : 0, 1};
        for (int v = 0; v < distance && v + distance < P; ++v)
          s.exchanges.push_back(reducing ? exchange{relative(v + distance), relative(v), n}
                                         : exchange{relative(v), relative(v + distance), n});
        steps.push_back(std::move(s));
      }
      break;
    }
    case collective::barrier:
      for (int distance = 1; distance < P; distance *= 2) steps.push_back(detail::shift(P, distance, 0));
      break;
    case collective::all_to_all_v: break;  // built from the counts by pairwise_steps
  }
  return steps;
}

// Pairwise exchange for uneven blocks: bytes[s][d] from rank s to rank d, step k pairs r with r+k.
inline std::vector<step> pairwise_steps(const std::vector<std::vector<double>>& bytes) {
  const int P = static_cast<int>(bytes.size());
  std::vector<step> steps;
  for (int k = 1; k < P; ++k) {
    step s{{}, 0, 1};
    for (int r = 0; r < P; ++r) {
      const int to = (r + k) % P;
      s.exchanges.push_back({r, to, bytes[static_cast<std::size_t>(r)][static_cast<std::size_t>(to)]});
    }
    steps.push_back(std::move(s));
  }
  return steps;
}

}  // namespace shardwise::sim
