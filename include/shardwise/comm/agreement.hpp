#pragma once
// What the ranks of a group must agree on when they call a collective: the operation, whether it is
// blocking or started (MPI never matches an iall_reduce with an all_reduce: the job would hang), the
// element type, the count, the root and the reduction (and, for all_to_all_v, that what each rank
// sends another is what that one expects). Every backend compares all ranks' calls before any data moves
// and throws argument_error on every rank, naming both ranks' calls:
//
//   [rank 1] all_reduce: rank 1 called all_reduce<float>(128 elements, sum) while rank 0 called
//   all_reduce<float>(64 elements, sum)
//
// The threads backend (and sim_gpu, which moves its data through it) always compares: every rank's
// call is in memory. The MPI backend compares when SHARDWISE_CHECK_AGREEMENT is 1, by default in
// debug builds (NDEBUG undefined); each collective then first all-gathers every rank's signature
// (one small, fixed-size message). Define SHARDWISE_CHECK_AGREEMENT=1 (CMake: SHARDWISE_CHECK_AGREEMENT=ON)
// to compare in release builds too, or 0 to skip it in debug builds; every translation unit of a
// program must see the same value.
#include <algorithm>
#include <array>
#include <concepts>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "shardwise/comm/calls.hpp"
#include "shardwise/comm/reduction.hpp"
#include "shardwise/core/element.hpp"

#ifndef SHARDWISE_CHECK_AGREEMENT
#ifdef NDEBUG
#define SHARDWISE_CHECK_AGREEMENT 0
#else
#define SHARDWISE_CHECK_AGREEMENT 1
#endif
#endif

namespace shardwise::agreement {

// Whether the MPI backend compares the ranks' calls (the threads backend always does).
inline constexpr bool checked_on_mpi = SHARDWISE_CHECK_AGREEMENT != 0;

// One rank's call as plain data of one fixed size, so that MPI can all-gather it as bytes whatever
// each rank called.
struct signature {
  std::array<char, 16> operation{};  // the call's name, NUL-padded
  std::array<char, 24> element{};    // element_name<T>(); empty for calls that move no elements
  std::int64_t elements = -1;        // -1: none, or compared pairwise (all_to_all_v)
  std::int32_t root = -1;            // -1: the call has no root
  std::int32_t reduction = -1;       // op as an int; -1: the call reduces nothing
  std::int32_t world_rank = -1;      // who called it (not compared; it names the rank in messages)
  std::int32_t started = 0;          // 1: begun by its i... form (iall_reduce), to be waited on

  [[nodiscard]] bool same_call_as(const signature& other) const noexcept {
    return operation == other.operation && started == other.started && element == other.element &&
           elements == other.elements && root == other.root && reduction == other.reduction;
  }

  // all_reduce<float>(128 elements, sum), ireduce<double>(4 elements, max, root 2), barrier()
  [[nodiscard]] std::string describe() const {
    std::string text = (started != 0 ? "i" : "") + std::string(operation.data());
    if (element[0] != '\0') text.append("<").append(element.data()).append(">");
    text += "(";
    std::string separator;
    auto argument = [&](const std::string& value) {
      text += separator + value;
      separator = ", ";
    };
    if (elements >= 0) argument(std::to_string(elements) + (elements == 1 ? " element" : " elements"));
    if (operation.data() == std::string_view("all_to_all_v")) argument("counts per rank");
    if (reduction >= 0) argument(std::string(name_of(static_cast<op>(reduction))));
    if (root >= 0) argument("root " + std::to_string(root));
    return text + ")";
  }
};
static_assert(std::is_trivially_copyable_v<signature> && sizeof(signature) % 8 == 0);

template <std::size_t N>
void copy_name(std::array<char, N>& into, std::string_view name) {
  std::copy_n(name.begin(), std::min(name.size(), N - 1), into.begin());
}

// The element type of a call descriptor (void for calls that move no elements).
template <class Call>
struct element_of_call {
  using type = void;
};
template <template <class> class Call, class T>
struct element_of_call<Call<T>> {
  using type = T;
};

// The signature of a call with `elements`, `root` and `reduction` as described on signature.
template <class Call>
[[nodiscard]] signature make_signature(int world_rank, std::int64_t elements = -1, int root = -1,
                                       std::optional<op> reduction = std::nullopt) {
  signature made;
  copy_name(made.operation, Call::name);
  using T = typename element_of_call<Call>::type;
  if constexpr (!std::is_void_v<T>) copy_name(made.element, element_name<T>());
  made.elements = elements;
  made.root = root;
  made.reduction = reduction ? static_cast<std::int32_t>(*reduction) : -1;
  made.world_rank = world_rank;
  return made;
}

template <class T>
signature signature_of(const calls::all_reduce<T>& c, int world_rank) {
  return make_signature<calls::all_reduce<T>>(world_rank, static_cast<std::int64_t>(c.in.size()), -1, c.reduction);
}
template <class T>
signature signature_of(const calls::reduce<T>& c, int world_rank) {
  return make_signature<calls::reduce<T>>(world_rank, static_cast<std::int64_t>(c.in.size()), c.root, c.reduction);
}
template <class T>
signature signature_of(const calls::reduce_scatter<T>& c, int world_rank) {
  return make_signature<calls::reduce_scatter<T>>(world_rank, static_cast<std::int64_t>(c.out.size()), -1, c.reduction);
}
template <class T>
signature signature_of(const calls::all_gather<T>& c, int world_rank) {
  return make_signature<calls::all_gather<T>>(world_rank, static_cast<std::int64_t>(c.in.size()));
}
template <class T>
signature signature_of(const calls::all_to_all<T>& c, int world_rank) {
  return make_signature<calls::all_to_all<T>>(world_rank, static_cast<std::int64_t>(c.in.size()));
}
template <class T>
signature signature_of(const calls::all_to_all_v<T>&, int world_rank) {
  return make_signature<calls::all_to_all_v<T>>(world_rank);  // counts: see count_disagreement
}
template <class T>
signature signature_of(const calls::broadcast<T>& c, int world_rank) {
  return make_signature<calls::broadcast<T>>(world_rank, static_cast<std::int64_t>(c.data.size()), c.root);
}
inline signature signature_of(const calls::barrier&, int world_rank) {
  return make_signature<calls::barrier>(world_rank);
}
inline signature signature_of(const calls::split&, int world_rank) { return make_signature<calls::split>(world_rank); }

// Collective calls have a signature; sends and receives, matched pair by pair, do not.
template <class Call>
concept collective_call = requires(const Call& call) {
  { signature_of(call, 0) } -> std::same_as<signature>;
};

// Whether every rank's call (signature_at(s) for s in [0, ranks)) is the call of rank `rank`; if not,
// the first rank that called something else, in words. Every rank finds a disagreement as soon as
// one exists, so all of them throw together.
template <class SignatureAt>
[[nodiscard]] std::optional<std::string> disagreement(int rank, int ranks, const SignatureAt& signature_at) {
  const signature& mine = signature_at(rank);
  for (int s = 0; s < ranks; ++s) {
    const signature& theirs = signature_at(s);
    if (!theirs.same_call_as(mine))
      return "rank " + std::to_string(mine.world_rank) + " called " + mine.describe() + " while rank " +
             std::to_string(theirs.world_rank) + " called " + theirs.describe();
  }
  return std::nullopt;
}

// all_to_all_v: whether sent(s, r), what rank s sends rank r, is expected(r, s), what r expects from
// s, for every pair; if not, the first pair in words (ranks named by world_rank_of).
template <class Sent, class Expected, class WorldRank>
[[nodiscard]] std::optional<std::string> count_disagreement(int ranks, const Sent& sent, const Expected& expected,
                                                            const WorldRank& world_rank_of) {
  for (int s = 0; s < ranks; ++s)
    for (int r = 0; r < ranks; ++r)
      if (sent(s, r) != expected(r, s))
        return "rank " + std::to_string(world_rank_of(s)) + " sends " + std::to_string(sent(s, r)) +
               (sent(s, r) == 1 ? " element" : " elements") + " to rank " + std::to_string(world_rank_of(r)) +
               ", which expects " + std::to_string(expected(r, s)) + " from it";
  return std::nullopt;
}

}  // namespace shardwise::agreement
