#pragma once
// Padding rules: how one global extent n is cut into `parts` consecutive pieces, piece k going to the
// k-th slot of a split. The rule is a type parameter of a layout, so the compiler (and the reader of a
// type) knows what a rank holds when the shape does not divide:
//
//   exact   n must be a multiple of parts; every piece has n/parts elements. A shape that does not
//           divide is rejected when the layout is built, naming the shape, the grid and the rule.
//   padded  every piece stores b = ceil(n/parts) elements; piece k owns the elements
//           [k*b, min(n, (k+1)*b)), so trailing pieces own fewer (possibly none) and the rest of their
//           storage is padding, held at zero. Storage per rank is equal (what equal-block collectives
//           such as all_gather and reduce_scatter need), at most parts-1 elements over n per extent.
//   ragged  pieces differ by at most one element: the first n % parts pieces own n/parts + 1, the others
//           n/parts, and store exactly what they own (ScaLAPACK's and MPI_Scatterv's usual cut).
//
// Either way results are exact: padding is never read as data, and every element has one owner piece.
#include <concepts>
#include <cstdint>
#include <string_view>

#include "shardwise/core/checked_arithmetic.hpp"

namespace shardwise {

// One piece of a cut extent: its first global index, how many elements it owns, how many it stores.
struct piece {
  std::int64_t offset = 0;
  std::int64_t extent = 0;
  std::int64_t stored = 0;
  friend bool operator==(const piece&, const piece&) = default;
};

// Where a global index lies: the piece that owns it and its index inside that piece.
struct piece_index {
  std::int64_t piece = 0;
  std::int64_t local = 0;
  friend bool operator==(const piece_index&, const piece_index&) = default;
};

// Required of a padding rule: a name for messages, whether every piece stores the same amount,
// whether n must divide, cut(n, parts, k) and find(n, parts, index). Callers guarantee parts >= 1,
// 0 <= k < parts and 0 <= index < n.
template <class R>
concept padding_rule = requires(std::int64_t n) {
  { R::name } -> std::convertible_to<std::string_view>;
  { R::is_balanced } -> std::convertible_to<bool>;
  { R::needs_divisible } -> std::convertible_to<bool>;
  { R::cut(n, n, n) } -> std::same_as<piece>;
  { R::find(n, n, n) } -> std::same_as<piece_index>;
};

struct exact {
  static constexpr std::string_view name = "exact";
  static constexpr bool is_balanced = true;
  static constexpr bool needs_divisible = true;
  static constexpr piece cut(std::int64_t n, std::int64_t parts, std::int64_t k) {
    const std::int64_t size = n / parts;
    return {k * size, size, size};
  }
  static constexpr piece_index find(std::int64_t n, std::int64_t parts, std::int64_t index) {
    const std::int64_t size = n / parts;
    return {index / size, index % size};
  }
};

struct padded {
  static constexpr std::string_view name = "padded";
  static constexpr bool is_balanced = true;
  static constexpr bool needs_divisible = false;
  static constexpr piece cut(std::int64_t n, std::int64_t parts, std::int64_t k) {
    const std::int64_t size = ceil_divide(n, parts);
    const std::int64_t offset = k * size < n ? k * size : n;
    const std::int64_t extent = n - offset < size ? n - offset : size;
    return {offset, extent, size};
  }
  static constexpr piece_index find(std::int64_t n, std::int64_t parts, std::int64_t index) {
    const std::int64_t size = ceil_divide(n, parts);
    return {index / size, index % size};
  }
};

struct ragged {
  static constexpr std::string_view name = "ragged";
  static constexpr bool is_balanced = false;
  static constexpr bool needs_divisible = false;
  static constexpr piece cut(std::int64_t n, std::int64_t parts, std::int64_t k) {
    const std::int64_t small = n / parts;
    const std::int64_t large_pieces = n % parts;
    const std::int64_t extent = k < large_pieces ? small + 1 : small;
    const std::int64_t offset =
        k < large_pieces ? k * (small + 1) : large_pieces * (small + 1) + (k - large_pieces) * small;
    return {offset, extent, extent};
  }
  static constexpr piece_index find(std::int64_t n, std::int64_t parts, std::int64_t index) {
    const std::int64_t small = n / parts;
    const std::int64_t large_pieces = n % parts;
    const std::int64_t in_large = large_pieces * (small + 1);
    if (index < in_large) return {index / (small + 1), index % (small + 1)};
    return {large_pieces + (index - in_large) / small, (index - in_large) % small};
  }
};

}  // namespace shardwise
