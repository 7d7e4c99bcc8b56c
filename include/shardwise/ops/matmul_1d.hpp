#pragma once
// Megatron's 1-D products (Shoeybi et al.): one dimension of the product m x k x n cut over mesh axis 0,
// the others whole on every rank. Each is a single local GEMM of the owned blocks; the cut dimension
// decides the result:
//
//   cut   layer and form                         operands                    result
//   n     column-parallel  Y = X·W               replicated · row_1d         row_1d
//   k     column-parallel  dX = dY·Wᵀ            row_1d · row_1dᵀ            partial_sum<replicated<>, 0>
//   n     column-parallel  dW = Xᵀ·dY            replicatedᵀ · row_1d        row_1d
//   k     row-parallel     Y = X·W               row_1d · col_1d             partial_sum<replicated<>, 0>
//   n     row-parallel     dX = dY·Wᵀ            replicated · col_1dᵀ        row_1d
//   m     row-parallel     dW = Xᵀ·dY            row_1dᵀ · replicated        col_1d
//
// When the inner dimension k is cut, the product returns the addends as a partial sum instead of
// all-reducing them: reduce(c) (tensor/reduce.hpp) all-reduces over axis 0, 2(P-1)/P · MK elements
// each way per rank, and a layer may instead fuse the sum with what follows (a reduce-scatter for
// sequence parallelism, a bias added once after the sum). Every other form moves nothing.
//
// Any padding rule, any shape: the operands that cut a dimension cut it with one rule, so their owned
// pieces line up, and only owned elements are multiplied. On meshes of more dimensions the products
// work the same, replicated over the axes other than 0 (data parallelism beside tensor parallelism).
#include <array>
#include <cstddef>
#include <type_traits>

#include "shardwise/layout/partial_sum.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/ops/local_product.hpp"
#include "shardwise/tensor/dtensor.hpp"

namespace shardwise::detail {

// How a layout cuts one dimension, as far as the 1-D rule cares.
enum class cut_1d { whole, over_axis_0, otherwise };

template <std::size_t N>
constexpr cut_1d classify_cut(const std::array<std::size_t, N>& axes) {
  if constexpr (N == 0) {
    return cut_1d::whole;
  } else {
    return N == 1 && axes[0] == 0 ? cut_1d::over_axis_0 : cut_1d::otherwise;
  }
}

// The cuts of op(Layout)'s rows and columns.
template <class Layout, bool Transposed>
constexpr cut_1d rows_cut() {
  if constexpr (Transposed) {
    return classify_cut(Layout::col_axes);
  } else {
    return classify_cut(Layout::row_axes);
  }
}
template <class Layout, bool Transposed>
constexpr cut_1d cols_cut() {
  return rows_cut<Layout, !Transposed>();
}

template <class Left, class Right, bool TransposeLeft, bool TransposeRight>
struct megatron_product {
  static constexpr bool exists = false;
};

template <split_layout Left, split_layout Right, bool TransposeLeft, bool TransposeRight>
struct megatron_product<Left, Right, TransposeLeft, TransposeRight> {
 private:
  static constexpr cut_1d m = rows_cut<Left, TransposeLeft>();
  static constexpr cut_1d k = cols_cut<Left, TransposeLeft>();
  static constexpr cut_1d n = cols_cut<Right, TransposeRight>();
  static constexpr bool cut_m = m == cut_1d::over_axis_0;
  static constexpr bool cut_k = k == cut_1d::over_axis_0;
  static constexpr bool cut_n = n == cut_1d::over_axis_0;
  static constexpr bool well_formed = m != cut_1d::otherwise && k != cut_1d::otherwise && n != cut_1d::otherwise &&
                                      rows_cut<Right, TransposeRight>() == k && int{cut_m} + cut_k + cut_n == 1;
  // The rule of the operand that cuts the dimension (for k both cut it and must agree).
  using padding = std::conditional_t<cut_n, typename Right::padding, typename Left::padding>;

 public:
  static constexpr bool exists =
      well_formed && (!cut_k || std::is_same_v<typename Left::padding, typename Right::padding>);
  using result = std::conditional_t<cut_k, partial_sum<replicated<>, 0>,
                                    std::conditional_t<cut_m, col_1d<padding>, row_1d<padding>>>;
};

template <bool TransposeLeft, bool TransposeRight, class T, class LeftLayout, class RightLayout, class Mesh>
[[nodiscard]] auto megatron_matmul(const dtensor<T, LeftLayout, Mesh>& left,
                                   const dtensor<T, RightLayout, Mesh>& right) {
  using result_layout = typename megatron_product<LeftLayout, RightLayout, TransposeLeft, TransposeRight>::result;
  dtensor<T, result_layout, Mesh> result(left.mesh(), product_extents<TransposeLeft, TransposeRight>(left, right));
  // The owned blocks as they are ([rows, columns]; r: this rank's part of the cut over axis 0, *: whole):
  //   m cut   C[r, *] = op(A)[r, *] · op(B)[*, *]
  //   k cut   C[*, *] = op(A)[*, r] · op(B)[r, *]   this rank's addend of C, summed later over axis 0
  //   n cut   C[*, r] = op(A)[*, *] · op(B)[*, r]
  multiply<TransposeLeft, TransposeRight>(left.mesh().axis(0), result.local(), left.local(), right.local(), false);
  return result;
}

}  // namespace shardwise::detail
