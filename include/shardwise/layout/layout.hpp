#pragma once
// The `layout` concept: which part of a global matrix each rank of a mesh holds.
//
// As with std::mdspan's layout policies, a layout is a policy type with a nested template
// `mapping<D>`, built from the global shape and the shape of a D-dimensional process grid:
//
//   typename L::template mapping<D> m(matrix_extents{rows, cols}, coordinates<D>{2, 2, 2});
//
// Required of a mapping (checked by layout_mapping below):
//   m.extents()           the global shape
//   m.ranks()             how many ranks the grid has (the product of its extents)
//   m.block_count(rank)   how many rectangular blocks `rank` holds (0 is allowed: vector_3d)
//   m.block(rank, b)      the b-th of them: global offsets, extents owned, extents stored (>= owned
//                         under padding; the padding is zero and never read as data)
//   m.owner(i, j)         which rank and block hold global element (i, j), and where in the block;
//                         for a replicated element, the replica on the lowest rank
//   m.replicas()          how many ranks hold each element (1 unless the layout replicates)
//   M::is_replicated      constexpr: some elements may live on several ranks
//   M::is_balanced        constexpr: every rank stores the same number of elements
// and the contract the library relies on: blocks of one rank are disjoint; blocks of different ranks
// are equal or disjoint; every element lies in replicas() blocks, one of them where owner() says.
// check_layout (layout/check_layout.hpp) verifies it for a given shape and grid.
//
// Tensors of rank > 2 (batch x sequence x hidden) are laid out as matrices by flatten(), which
// multiplies the leading dimensions into rows, as the 3-D paper does.
//
// Ranks are numbered as process_mesh numbers them: row-major, last axis fastest (rank_in_grid, mesh/shape.hpp).
// Mappings throw argument_error (or mesh_error, for a grid they cannot use) from their constructor with
// rank -1 ("[no rank]"); dtensor reports such errors with the rank that hit them.
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "shardwise/core/checked_arithmetic.hpp"
#include "shardwise/core/error.hpp"
#include "shardwise/layout/padding.hpp"
#include "shardwise/mesh/shape.hpp"

namespace shardwise {

// The global shape of a distributed matrix.
struct matrix_extents {
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  friend bool operator==(const matrix_extents&, const matrix_extents&) = default;
};

// How messages write a shape: "1000x999".
[[nodiscard]] inline std::string extents_string(std::int64_t rows, std::int64_t cols) {
  return std::to_string(rows) + "x" + std::to_string(cols);
}
[[nodiscard]] inline std::string extents_string(const matrix_extents& extents) {
  return extents_string(extents.rows, extents.cols);
}

// A tensor of any rank as a matrix: leading dimensions multiply into rows, the last one is columns.
// A scalar (no dimensions) is 1x1; a vector of n elements is 1xn. Throws argument_error for a negative
// extent, or a shape whose element count does not fit in 64 bits.
[[nodiscard]] inline matrix_extents flatten(std::span<const std::int64_t> shape) {
  if (shape.empty()) return {1, 1};
  std::int64_t rows = 1;
  std::int64_t elements = 1;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0)
      throw argument_error(
          -1, "flatten",
          "the shape " + shape_string(shape) + " has a negative extent in dimension " + std::to_string(d));
    elements = require_fits(product_if_fits(elements, shape[d]), -1, "flatten", [&] {
      return "a tensor of shape " + shape_string(shape) + " has more elements than fit in 64 bits";
    });
    if (d + 1 < shape.size()) rows *= shape[d];  // a factor of `elements`, so it fits
  }
  return {rows, shape.back()};
}

// A rectangle of the global matrix held by one rank. Stored row-major with stored_cols per row.
struct block_info {
  std::int64_t row_offset = 0;
  std::int64_t col_offset = 0;
  std::int64_t rows = 0;  // owned
  std::int64_t cols = 0;
  std::int64_t stored_rows = 0;  // allocated: owned plus padding
  std::int64_t stored_cols = 0;
  // Throw argument_error when the count does not fit in 64 bits (a layout's arithmetic gone wrong).
  [[nodiscard]] std::int64_t elements() const { return count(rows, cols, "owns"); }
  [[nodiscard]] std::int64_t stored_elements() const { return count(stored_rows, stored_cols, "stores"); }
  friend bool operator==(const block_info&, const block_info&) = default;

 private:
  [[nodiscard]] std::int64_t count(std::int64_t r, std::int64_t c, std::string_view verb) const {
    return require_fits(product_if_fits(r, c), -1, "layout::block", [&] {
      return "the block at (" + std::to_string(row_offset) + ", " + std::to_string(col_offset) + ") " +
             std::string(verb) + " " + extents_string(r, c) + " elements, more than fit in 64 bits";
    });
  }
};

// Where a global element lives: a rank, one of its blocks, and the index inside that block.
struct location {
  int rank = 0;
  int block = 0;
  std::int64_t row = 0;
  std::int64_t col = 0;
  friend bool operator==(const location&, const location&) = default;
};

template <class M>
concept layout_mapping = std::copyable<M> && requires(const M& m, int rank, int b, std::int64_t i) {
  { m.extents() } -> std::same_as<matrix_extents>;
  { m.ranks() } -> std::convertible_to<int>;
  { m.block_count(rank) } -> std::convertible_to<int>;
  { m.block(rank, b) } -> std::same_as<block_info>;
  { m.owner(i, i) } -> std::same_as<location>;
  { m.replicas() } -> std::convertible_to<int>;
  // Constant expressions, so algorithms can require them with static_assert / requires.
  typename std::bool_constant<M::is_replicated>;
  typename std::bool_constant<M::is_balanced>;
};

// What reading a mapping's blocks takes: every layout_mapping, and a mapping_ref to one
// (layout/mapping_ref.hpp).
template <class M>
concept block_mapping = requires(const M& m, int rank, int b) {
  { m.block_count(rank) } -> std::convertible_to<int>;
  { m.block(rank, b) } -> std::same_as<block_info>;
};

// L is a layout for D-dimensional meshes.
template <class L, std::size_t D>
concept layout = requires { typename L::template mapping<D>; } && layout_mapping<typename L::template mapping<D>> &&
                 std::constructible_from<typename L::template mapping<D>, matrix_extents, coordinates<D>>;

template <class L, std::size_t D>
using mapping_t = typename L::template mapping<D>;

// ---- helpers every mapping may use

template <std::size_t D>
[[nodiscard]] constexpr int grid_size(const coordinates<D>& shape) {
  int size = 1;
  for (const int extent : shape) size *= extent;
  return size;
}

// Global (row, col) of a location: the way back from owner().
template <layout_mapping M>
[[nodiscard]] std::pair<std::int64_t, std::int64_t> global_index(const M& mapping, const location& at) {
  const block_info b = mapping.block(at.rank, at.block);
  return {b.row_offset + at.row, b.col_offset + at.col};
}

// Where each of `rank`'s blocks starts in its storage (blocks back to back, in block order, each with
// its stored extents), and one more entry: the end, the rank's memory in elements. Throws
// argument_error when that total does not fit in 64 bits.
template <block_mapping M>
[[nodiscard]] std::vector<std::int64_t> block_starts(const M& mapping, int rank) {
  const int blocks = mapping.block_count(rank);
  std::vector<std::int64_t> starts(static_cast<std::size_t>(blocks > 0 ? blocks : 0) + 1, 0);
  for (int b = 0; b < blocks; ++b) {
    const auto k = static_cast<std::size_t>(b);
    starts[k + 1] =
        require_fits(sum_if_fits(starts[k], mapping.block(rank, b).stored_elements()), -1, "layout::block", [&] {
          return "rank " + std::to_string(rank) + "'s blocks 0.." + std::to_string(b) +
                 " store more elements than fit in 64 bits";
        });
  }
  return starts;
}

// Elements `rank` stores (owned plus padding): its memory, in elements.
template <block_mapping M>
[[nodiscard]] std::int64_t stored_elements(const M& mapping, int rank) {
  return block_starts(mapping, rank).back();
}

// rows * cols of a global matrix; throws argument_error naming `rank` and `operation` for a negative
// extent or a count that does not fit in 64 bits.
[[nodiscard]] inline std::int64_t matrix_elements(const matrix_extents& extents, int rank, std::string_view operation) {
  if (extents.rows < 0 || extents.cols < 0) {
    const bool rows = extents.rows < 0;
    throw argument_error(
        rank, operation,
        "a matrix cannot have " + std::to_string(rows ? extents.rows : extents.cols) + (rows ? " rows" : " columns"));
  }
  return require_fits(product_if_fits(extents.rows, extents.cols), rank, operation,
                      [&] { return "a " + extents_string(extents) + " matrix has more elements than fit in 64 bits"; });
}

namespace detail {

// "rows 0..5, columns 2..3": the elements a block owns, as messages name them.
[[nodiscard]] inline std::string owned_ranges(const block_info& b) {
  return "rows " + std::to_string(b.row_offset) + ".." + std::to_string(b.row_offset + b.rows - 1) + ", columns " +
         std::to_string(b.col_offset) + ".." + std::to_string(b.col_offset + b.cols - 1);
}

// Throws unless `extent` (>= 0, as matrix_elements checks) elements of `dimension` ("rows", "columns")
// can be cut into `parts` under `Rule`. `how` says over what the dimension is cut ("rows over mesh axes
// (0, 1) of the grid 2x2").
template <padding_rule Rule>
void check_cut(std::int64_t extent, std::int64_t parts, std::string_view dimension, const std::string& how) {
  if (Rule::needs_divisible && extent % parts != 0)
    throw argument_error(-1, "layout",
                         std::to_string(extent) + " " + std::string(dimension) + " do not split into " +
                             std::to_string(parts) + " equal parts (" + how + ", padding rule " +
                             std::string(Rule::name) + "); use the padded or ragged rule, or a shape divisible by " +
                             std::to_string(parts));
}

// Throws unless 0 <= rank < ranks and 0 <= b < blocks.
inline void check_block(int rank, int ranks, int b, int blocks) {
  if (rank < 0 || rank >= ranks)
    throw argument_error(-1, "layout::block",
                         "rank " + std::to_string(rank) + " is outside a grid of " + std::to_string(ranks) + " ranks");
  if (b < 0 || b >= blocks)
    throw argument_error(-1, "layout::block",
                         "rank " + std::to_string(rank) + " holds " + std::to_string(blocks) + " blocks, not block " +
                             std::to_string(b));
}

// Throws unless (i, j) lies in the matrix.
inline void check_index(const matrix_extents& extents, std::int64_t i, std::int64_t j) {
  if (i < 0 || i >= extents.rows || j < 0 || j >= extents.cols)
    throw argument_error(-1, "layout::owner",
                         "element (" + std::to_string(i) + ", " + std::to_string(j) + ") is outside the " +
                             extents_string(extents) + " matrix");
}

}  // namespace detail
}  // namespace shardwise
