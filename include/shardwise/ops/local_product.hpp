#pragma once
// What every distributed matrix product (ops/matmul.hpp) shares: the operand view transposed(t), the
// local GEMM out = op(left) · op(right) on blocks of stored buffers (op a transpose or not), the global
// shape check, and the reusable buffers the products gather into.
//
// The local GEMM (ops/gemm.hpp) is the one place every product computes, so it is where a product's
// compute takes modelled time: on a communicator that launches kernels (sim_gpu, sim/sim_gpu.hpp) each
// GEMM is a kernel declaring its work (2·m·n·k FLOPs, its operands read and its result written); on the
// others it simply runs, and the check is compiled away.
#include <Eigen/Core>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "shardwise/core/error.hpp"
#include "shardwise/core/kernel.hpp"
#include "shardwise/core/rank_local.hpp"
#include "shardwise/core/reused_buffer.hpp"
#include "shardwise/core/work.hpp"
#include "shardwise/layout/layout.hpp"
#include "shardwise/ops/gemm.hpp"
#include "shardwise/tensor/dtensor.hpp"

namespace shardwise {

// transposed(t): the operand t read as its transpose in a product, matmul(a, transposed(b)) = A·Bᵀ.
// A view: it refers to t (which must outlive it) and moves nothing; the product's algorithm does the
// transposing inside its local GEMM.
template <class Tensor>
struct transposed_view {
  const Tensor& tensor;
};

template <class T, class Layout, class Mesh>
[[nodiscard]] transposed_view<dtensor<T, Layout, Mesh>> transposed(const dtensor<T, Layout, Mesh>& tensor) {
  return {tensor};
}
// A view of a temporary would dangle before the product reads it.
template <class T, class Layout, class Mesh>
auto transposed(const dtensor<T, Layout, Mesh>&&) = delete;

namespace detail {

// A dtensor's only block with its padding, as stored: what the products multiply and send.
template <class T, class Layout, class Mesh>
[[nodiscard]] strided_map<const T> stored_block(const dtensor<T, Layout, Mesh>& tensor) {
  const block_info& b = tensor.block();
  return {tensor.data().data(), b.stored_rows, b.stored_cols, Eigen::OuterStride<>(b.stored_cols)};
}

// Rows first..first+count of op(m) (op a transpose or not), as a block of m itself: writable when m
// is.
template <bool Transposed, class Matrix>
[[nodiscard]] auto rows_of(Matrix&& m, std::int64_t first, std::int64_t count) {
  if constexpr (Transposed) {
    return m.middleCols(first, count);
  } else {
    return m.middleRows(first, count);
  }
}

// out = op(left) · op(right), or out += when `accumulate`. `carrier` is the communicator that moves the
// result on: where it launches kernels, the GEMM is one, and what it sends afterwards waits for it.
template <bool TransposeLeft, bool TransposeRight, class Communicator, class Out, class Left, class Right>
void multiply(Communicator& carrier, Out&& out, const Left& left, const Right& right, bool accumulate) {
  const auto result = destination(out);
  const auto a = operand<TransposeLeft>(left);
  const auto b = operand<TransposeRight>(right);
  const auto m = static_cast<double>(result.rows());
  const auto n = static_cast<double>(result.cols());
  const auto k = static_cast<double>(a.is_transposed ? a.stored.rows() : a.stored.cols());
  using operand_element = typename decltype(a.stored)::Scalar;
  using result_element = typename decltype(result)::Scalar;
  run_kernel(
      carrier, gemm_work<operand_element, result_element>(m, n, k, accumulate),
      [&] {
        return "GEMM " + std::to_string(result.rows()) + "x" + std::to_string(result.cols()) + "x" +
               std::to_string(static_cast<std::int64_t>(k));
      },
      [&] { gemm(result, a, b, accumulate); });
}

// How error messages name the three forms.
template <bool TransposeLeft, bool TransposeRight>
constexpr const char* form_name() {
  if constexpr (TransposeLeft && TransposeRight) return "A^T*B^T";
  if constexpr (TransposeLeft) return "A^T*B";
  if constexpr (TransposeRight) return "A*B^T";
  return "A*B";
}

// The global shape of op(left) · op(right); throws argument_error, on every rank alike, when the
// operands live on different meshes or their inner dimensions differ.
template <bool TransposeLeft, bool TransposeRight, class Left, class Right>
[[nodiscard]] matrix_extents product_extents(const Left& left, const Right& right,
                                             std::string_view operation = "matmul") {
  const int rank = left.mesh().world().world_rank();
  if (&left.mesh() != &right.mesh())
    throw argument_error(rank, operation, "the operands of a product live on different meshes");
  const std::int64_t left_inner = TransposeLeft ? left.rows() : left.cols();
  const std::int64_t right_inner = TransposeRight ? right.cols() : right.rows();
  if (left_inner != right_inner)
    throw argument_error(rank, operation,
                         std::string(form_name<TransposeLeft, TransposeRight>()) + " of a " +
                             extents_string(left.rows(), left.cols()) + " A and a " +
                             extents_string(right.rows(), right.cols()) + " B: the inner dimensions " +
                             std::to_string(left_inner) + " and " + std::to_string(right_inner) + " differ");
  return {TransposeLeft ? left.cols() : left.rows(), TransposeRight ? right.rows() : right.cols()};
}

// The buffers the products gather operands and partial results into, one set per rank
// (core/rank_local.hpp), each reused by every later product (core/reused_buffer.hpp): a training step
// allocates no communication buffers after its first. Contents are not kept between calls.
enum class buffer : std::size_t { left, right, product };

template <class T>
struct workspace_buffers {
  std::array<reused_buffer<T>, 3> buffers;
};

template <class T>
[[nodiscard]] std::span<T> workspace(buffer which, std::size_t elements) {
  return rank_local<workspace_buffers<T>>().buffers[static_cast<std::size_t>(which)].take(elements);
}

}  // namespace detail
}  // namespace shardwise
