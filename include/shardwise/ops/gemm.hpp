#pragma once
// gemm(out, left, right): out = op(left)·op(right), the one place the library's local products reach
// Eigen's GEMM. Every operand is first described as what it is in memory, a row-major block of a buffer
// (rows an outer stride apart) read as stored or transposed, so the products of the distributed
// matrix products, attention and the vocabulary's logits instantiate Eigen's product once for each of
// the four forms they use, not once for each expression type (a block of a map, a transposed block, a
// matrix...) they happen to hold: each instantiation costs seconds of compile time
// (docs/compile-time.md).
#include <Eigen/Core>
#include <type_traits>

#include "shardwise/core/bf16_eigen.hpp"

namespace shardwise::detail {

template <class T>
using row_major = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
// A row-major block of a buffer, rows `stride` elements apart; const T gives a read-only map.
template <class T>
using strided_map =
    Eigen::Map<std::conditional_t<std::is_const_v<T>, const row_major<std::remove_const_t<T>>, row_major<T>>,
               Eigen::Unaligned, Eigen::OuterStride<>>;

// A product's operand: a stored row-major block, read as its transpose when Transposed.
template <class T, bool Transposed>
struct gemm_operand {
  static constexpr bool is_transposed = Transposed;
  strided_map<const T> stored;

  [[nodiscard]] gemm_operand<T, !Transposed> transposed() const { return {stored}; }
  // op(stored), as the product reads it.
  [[nodiscard]] auto read() const {
    if constexpr (Transposed) {
      return stored.transpose();
    } else {
      return stored;
    }
  }
};

template <class Expression>
constexpr void require_stored_block() {
  using E = std::remove_cvref_t<Expression>;
  static_assert((E::Flags & Eigen::DirectAccessBit) != 0 && E::InnerStrideAtCompileTime == 1,
                "shardwise: a local product's operand must be a block of stored elements, contiguous along its rows "
                "or its columns (a matrix, a map or a block of one, or the transpose of one)");
}

// `matrix` as an operand: a row-major block as stored, or a column-major one (the transpose of a
// row-major block) as the transpose of its storage.
template <class Expression>
[[nodiscard]] auto operand(const Expression& matrix) {
  require_stored_block<Expression>();
  using T = typename Expression::Scalar;
  if constexpr ((Expression::Flags & Eigen::RowMajorBit) != 0) {
    return gemm_operand<T, false>{
        {matrix.data(), matrix.rows(), matrix.cols(), Eigen::OuterStride<>(matrix.outerStride())}};
  } else {
    return gemm_operand<T, true>{
        {matrix.data(), matrix.cols(), matrix.rows(), Eigen::OuterStride<>(matrix.outerStride())}};
  }
}

// `matrix` as an operand, read transposed when Transpose.
template <bool Transpose, class Expression>
[[nodiscard]] auto operand(const Expression& matrix) {
  if constexpr (Transpose) {
    return operand(matrix).transposed();
  } else {
    return operand(matrix);
  }
}

// A writable row-major block (a matrix, a map or a block of one) as the map a product writes into.
template <class Expression>
[[nodiscard]] auto destination(Expression&& matrix) {
  using E = std::remove_cvref_t<Expression>;
  require_stored_block<E>();
  static_assert((E::Flags & Eigen::RowMajorBit) != 0, "shardwise: a local product writes into a row-major block");
  using T = typename E::Scalar;
  return strided_map<T>(matrix.data(), matrix.rows(), matrix.cols(), Eigen::OuterStride<>(matrix.outerStride()));
}

// out = op(left)·op(right), or out += it when `accumulate`. `out` must not overlap the operands.
// Only += is instantiated: Eigen's = zeroes the destination and accumulates into it too. bf16 operands
// are multiplied in float, their product rounded once into `out`, which may be float (a bf16 weight's
// float gradient).
template <class Out, class T, bool TransposeLeft, bool TransposeRight>
void gemm(Eigen::Map<row_major<Out>, Eigen::Unaligned, Eigen::OuterStride<>> out,  // strided_map<Out>
          const gemm_operand<T, TransposeLeft>& left, const gemm_operand<T, TransposeRight>& right,
          bool accumulate = false) {
  if constexpr (std::is_same_v<Out, T> && !std::is_same_v<T, bf16>) {
    if (!accumulate) out.setZero();
    out.noalias() += left.read() * right.read();
  } else {
    static_assert(std::is_same_v<T, bf16> && (std::is_same_v<Out, bf16> || std::is_same_v<Out, float>),
                  "shardwise: a product of bf16 operands goes into bf16 or float; others into their own type");
    const row_major<float> product = left.read().template cast<float>() * right.read().template cast<float>();
    if (accumulate) out = (out.template cast<float>() + product).template cast<Out>();
    else
      out = product.template cast<Out>();
  }
}

}  // namespace shardwise::detail
