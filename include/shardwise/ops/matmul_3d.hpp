#pragma once
// The 3-D paper's load-balanced products (Bian et al., Algorithms 1-6) on a p_x x p_y x p_z grid, for
// the layouts of cube_3d<directions<a, b, c>, Padding> (layout/cube_3d.hpp; the paper's default is
// (a, b, c) = (y, x, z)). Three forms, one algorithm (ops/matmul_3d_steps.hpp): all-gather the left
// operand along one axis, the right along another, one local GEMM, reduce-scatter the result along the
// third. This file matches a pair of layouts to its form and handles shapes whose blocks do not line up.
//
//   form        operands                  gathers              result, reduce-scattered along
//   C = A·B     A: input,  B: weight      A along a, B along b   output, along c   (Algorithm 1)
//   dA = dC·Bᵀ  dC: output, B: weight     dC along c, B along b  input,  along a   (Algorithm 2, line 1)
//   dB = Aᵀ·dC  A: input,  dC: output     A along a, dC along c  weight, along b   (Algorithm 2, line 2)
//
// Per rank, with exact shapes, each form sends and receives (p_g - 1) times its block for each
// all-gather and reduce-scatter along an axis of p_g ranks: on a p x p x p cube (p - 1)(MN + NK + MK)/p³
// elements, the paper's count.
//
// Shapes that do not divide. The blocks are multiplied as stored, padding included (padding is held at
// zero, so it adds zeros). That is exact whenever, for each of the product's dimensions m, k, n, the
// two tensors that cut it store pieces of one size laid end to end over the same total extent: always
// for exact layouts, for padded layouts when the rounded-up extents agree (e.g. every dimension
// divisible by its parts, or p x p x p cubes for m), for ragged layouts when the pieces are equal.
// Otherwise — the general path — each operand is moved (one all_to_all_v each) into exact layouts of
// the dimensions rounded up to a multiple of both cuts, the product runs there on zero-padded blocks,
// and the result is moved back (one more all_to_all_v): about twice the traffic of the direct path,
// plus a little arithmetic on the rounding.
//
// matmul_options::chunks pipelines the product in bands of rows (ops/matmul_3d_in_bands.hpp): the left
// operand's all-gather, the GEMM and the reduce-scatter, band by band.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <string>

#include "shardwise/core/checked_arithmetic.hpp"
#include "shardwise/layout/cube_3d.hpp"
#include "shardwise/layout/padding.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/ops/local_product.hpp"
#include "shardwise/ops/matmul_3d_in_bands.hpp"
#include "shardwise/ops/matmul_3d_steps.hpp"
#include "shardwise/tensor/dtensor.hpp"
#include "shardwise/tensor/exchange.hpp"

namespace shardwise::detail {

// Which 3-D form a pair of layouts makes, matched on the axes (a, b, c) of directions<a, b, c> (see
// cube_3d.hpp for the layouts written with them). Pairs of other layouts have no 3-D product.
template <class Left, class Right, bool TransposeLeft, bool TransposeRight>
struct cube_product {
  static constexpr bool exists = false;
};

// C = A·B: A input (rows over (b, a), columns over c), B weight (rows over c, columns over (a, b)).
// Gathering A along a leaves its rows over b; B along b leaves its columns over a, the pieces side by
// side; the local GEMM sums over A's columns cut over c, so the sum along c completes it.
template <std::size_t a, std::size_t b, std::size_t c, class Padding>
struct cube_product<split<rows_over<b, a>, cols_over<c>, Padding>, split<rows_over<c>, cols_over<a, b>, Padding>, false,
                    false> {
  static constexpr bool exists = true;
  using result = typename cube_3d<directions<a, b, c>, Padding>::output;
  static constexpr cube_steps steps{.y = a, .x = b, .z = c, .b_side_by_side = true, .c_side_by_side = false};
};

// dA = dC·Bᵀ: dC output (rows over (b, c), columns over a), B weight. dC gathered along c: rows over b;
// B along b: columns over a, which Bᵀ contracts with dC's columns; the sum along a completes it.
template <std::size_t a, std::size_t b, std::size_t c, class Padding>
struct cube_product<split<rows_over<b, c>, cols_over<a>, Padding>, split<rows_over<c>, cols_over<a, b>, Padding>, false,
                    true> {
  static constexpr bool exists = true;
  using result = typename cube_3d<directions<a, b, c>, Padding>::input;
  static constexpr cube_steps steps{.y = c, .x = b, .z = a, .b_side_by_side = true, .c_side_by_side = false};
};

// dB = Aᵀ·dC: A input, dC output; both gathered to rows over b (A along a, dC along c), so Aᵀ·dC
// contracts over b, and the reduce-scatter along b cuts the result's columns.
template <std::size_t a, std::size_t b, std::size_t c, class Padding>
struct cube_product<split<rows_over<b, a>, cols_over<c>, Padding>, split<rows_over<b, c>, cols_over<a>, Padding>, true,
                    false> {
  static constexpr bool exists = true;
  using result = typename cube_3d<directions<a, b, c>, Padding>::weight;
  static constexpr cube_steps steps{.y = a, .x = c, .z = b, .b_side_by_side = false, .c_side_by_side = true};
};

// One dimension of the product (m, k or n): its extent, and the parts each of the two tensors that cut
// it cuts it into.
struct product_dimension {
  std::int64_t extent;
  std::int64_t parts_one;
  std::int64_t parts_other;
};

// How many parts a layout cuts its rows (or columns) into on `grid`.
template <class Layout, std::size_t D>
[[nodiscard]] std::int64_t cut_parts(const coordinates<D>& grid, bool columns) {
  std::int64_t parts = 1;
  if (columns) {
    for (const std::size_t axis : Layout::col_axes) parts *= grid[axis];
  } else {
    for (const std::size_t axis : Layout::row_axes) parts *= grid[axis];
  }
  return parts;
}

// m (cut by op(A) and C), k (by op(A) and op(B)) and n (by op(B) and C) of C = op(A)·op(B).
template <bool TransposeLeft, bool TransposeRight, class LeftLayout, class RightLayout, class ResultLayout,
          std::size_t D>
[[nodiscard]] std::array<product_dimension, 3> dimensions_of_product(const coordinates<D>& grid,
                                                                     const matrix_extents& shape, std::int64_t inner) {
  return {{{shape.rows, cut_parts<LeftLayout>(grid, TransposeLeft), cut_parts<ResultLayout>(grid, false)},
           {inner, cut_parts<LeftLayout>(grid, !TransposeLeft), cut_parts<RightLayout>(grid, TransposeRight)},
           {shape.cols, cut_parts<RightLayout>(grid, !TransposeRight), cut_parts<ResultLayout>(grid, true)}}};
}

// The extent n elements cut into `parts` occupy in storage, when the stored pieces are all alike and
// lie end to end (n rounded up under padded); -1 when they are not (ragged pieces of two sizes).
template <padding_rule Rule>
[[nodiscard]] std::int64_t stored_extent(std::int64_t n, std::int64_t parts) {
  const std::int64_t size = Rule::cut(n, parts, 0).stored;
  for (std::int64_t k = 0; k < parts; ++k) {
    const piece p = Rule::cut(n, parts, k);
    if (p.stored != size || (p.extent > 0 && p.offset != k * size)) return -1;
  }
  return parts * size;
}

// Whether the stored blocks can be multiplied as they are: in each dimension both tensors that cut it
// store pieces of one size end to end over the same extent.
template <padding_rule Rule>
[[nodiscard]] bool blocks_line_up(const std::array<product_dimension, 3>& dimensions) {
  return std::ranges::all_of(dimensions, [](const product_dimension& d) {
    const std::int64_t one = stored_extent<Rule>(d.extent, d.parts_one);
    return one >= 0 && one == stored_extent<Rule>(d.extent, d.parts_other);
  });
}

// m, k, n rounded up to a multiple of both of their cuts: the shapes of the general path.
[[nodiscard]] inline std::array<std::int64_t, 3> rounded_up(const std::array<product_dimension, 3>& dimensions,
                                                            int world_rank) {
  std::array<std::int64_t, 3> rounded{};
  for (std::size_t d = 0; d < 3; ++d) {
    const std::int64_t unit = std::lcm(dimensions[d].parts_one, dimensions[d].parts_other);
    const auto too_large = [&] {
      return "the product's dimension of " + std::to_string(dimensions[d].extent) + ", rounded up to a multiple of " +
             std::to_string(unit) + ", does not fit in 64 bits";
    };
    rounded[d] =
        require_fits(product_if_fits(ceil_divide(dimensions[d].extent, unit), unit), world_rank, "matmul", too_large);
  }
  return rounded;
}

// split<Rows, Cols, Padding> with another padding rule.
template <class Layout, class Padding>
struct with_padding;
template <class Rows, class Cols, class Old, class Padding>
struct with_padding<split<Rows, Cols, Old>, Padding> {
  using type = split<Rows, Cols, Padding>;
};

// Moves `tensor` into a tensor of Layout and `extents` on the same mesh (see the top of this file).
template <class Layout, class T, class From, class Mesh>
[[nodiscard]] dtensor<T, Layout, Mesh> moved_into(const dtensor<T, From, Mesh>& tensor, matrix_extents extents) {
  dtensor<T, Layout, Mesh> moved(tensor.mesh(), extents);
  exchange(tensor.mesh(), tensor.mapping(), tensor.data(), moved.mapping(), moved.data(), "matmul");
  return moved;
}

// op(left)·op(right) by the form their layouts make: the stored blocks multiplied as they are when they
// line up, else through exact layouts of the rounded shapes (see the top of this file); plain, or in
// bands when chunks > 1.
template <bool TransposeLeft, bool TransposeRight, class T, class LeftLayout, class RightLayout, class Mesh>
[[nodiscard]] auto cube_matmul(const dtensor<T, LeftLayout, Mesh>& left, const dtensor<T, RightLayout, Mesh>& right,
                               int chunks) {
  using rule = cube_product<LeftLayout, RightLayout, TransposeLeft, TransposeRight>;
  using result_layout = typename rule::result;
  constexpr cube_steps steps = rule::steps;
  Mesh& mesh = left.mesh();
  const matrix_extents shape = product_extents<TransposeLeft, TransposeRight>(left, right);
  const auto multiply_blocks = [&](const auto& a, const auto& b, auto& c) {
    if (chunks == 1) {
      cube_multiply<steps, TransposeLeft, TransposeRight>(mesh, a.data(), a.block(), b.data(), b.block(), c.data());
    } else {
      cube_multiply_in_bands<steps, TransposeLeft, TransposeRight>(mesh, a.data(), a.block(), b.data(), b.block(),
                                                                   c.data(), chunks);
    }
  };
  const auto dimensions = dimensions_of_product<TransposeLeft, TransposeRight, LeftLayout, RightLayout, result_layout>(
      mesh.shape(), shape, TransposeLeft ? left.rows() : left.cols());
  if (blocks_line_up<typename result_layout::padding>(dimensions)) {
    dtensor<T, result_layout, Mesh> result(mesh, shape);
    multiply_blocks(left, right, result);
    return result;
  }

  // The general path: exact layouts of the dimensions rounded up to a multiple of both cuts.
  const auto [m, k, n] = rounded_up(dimensions, mesh.world().world_rank());
  const auto a = moved_into<typename with_padding<LeftLayout, exact>::type>(
      left, TransposeLeft ? matrix_extents{k, m} : matrix_extents{m, k});
  const auto b = moved_into<typename with_padding<RightLayout, exact>::type>(
      right, TransposeRight ? matrix_extents{n, k} : matrix_extents{k, n});
  dtensor<T, typename with_padding<result_layout, exact>::type, Mesh> product(mesh, {m, n});
  multiply_blocks(a, b, product);
  return moved_into<result_layout>(product, shape);
}

}  // namespace shardwise::detail
