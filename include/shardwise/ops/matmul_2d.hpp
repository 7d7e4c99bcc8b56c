#pragma once
// SUMMA (van de Geijn and Watts; Optimus uses it for Transformers) on a q x q grid: every operand and
// the result are block_2d (rows over grid rows, axis 0; columns over grid columns, axis 1), rank (i, j)
// holding block (i, j). q steps; in step t:
//
//   C = A·B    broadcast A(i, t) along grid row i and B(t, j) along grid column j;
//              C(i, j) += A(i, t)·B(t, j)                                  (C stays, A and B move)
//   C = A·Bᵀ   broadcast B(t, j) along grid column j; A(i, j)·B(t, j)ᵀ is rank (i, j)'s addend of
//              C(i, t): reduce it along grid row i to column t              (A stays)
//   C = Aᵀ·B   broadcast A(i, t) along grid row i; A(i, t)ᵀ·B(i, j) is rank (i, j)'s addend of
//              C(t, j): reduce it along grid column j to row t              (B stays)
//
// Per rank with exact shapes and blocks of |A|, |B|, |C| elements: A·B receives (q-1)(|A| + |B|) and
// sends |A| + |B| (as the root of one broadcast of each); A·Bᵀ receives (q-1)(|B| + |C|) and sends
// |B| + (q-1)|C|; Aᵀ·B receives (q-1)(|A| + |C|) and sends |A| + (q-1)|C|.
//
// Any padding rule and shape: operands cut the dimension they share over q parts with one rule, so
// the pieces line up; broadcasts carry the root's stored block (its size known to every rank from the
// layout), and only owned elements are multiplied. A grid that is not square throws mesh_error.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>

#include "shardwise/comm/reduction.hpp"
#include "shardwise/core/error.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/ops/local_product.hpp"
#include "shardwise/tensor/dtensor.hpp"

namespace shardwise::detail {

template <class Left, class Right, bool TransposeLeft, bool TransposeRight>
struct summa_product {
  static constexpr bool exists = false;
};
template <class Padding, bool TransposeLeft, bool TransposeRight>
struct summa_product<block_2d<Padding>, block_2d<Padding>, TransposeLeft, TransposeRight> {
  static constexpr bool exists = true;
  using result = block_2d<Padding>;
};

// The owned part of rank `owner`'s block under `mapping`, in a buffer that holds the block as stored.
template <class T, class Mapping>
[[nodiscard]] strided_map<T> owned_part(T* stored, const Mapping& mapping, int owner) {
  const block_info b = mapping.block(owner, 0);
  return {stored, b.rows, b.cols, Eigen::OuterStride<>(b.stored_cols)};
}

// Rank (i, j)'s block (i, t) or (t, j) — coordinate `axis` replaced by t — copied into `slot` by its
// owner and broadcast along `axis`, whose rank t the owner is.
template <class T, class Layout, class Mesh>
[[nodiscard]] strided_map<const T> broadcast_block(const dtensor<T, Layout, Mesh>& tensor, int axis, int t,
                                                   buffer slot) {
  Mesh& mesh = tensor.mesh();
  coordinates<2> point = mesh.coords();
  point[static_cast<std::size_t>(axis)] = t;
  const int owner = mesh.rank_of(point);
  const std::span<T> panel =
      workspace<T>(slot, static_cast<std::size_t>(tensor.mapping().block(owner, 0).stored_elements()));
  auto& line = mesh.axis(axis);
  if (line.rank() == t) std::ranges::copy(tensor.data(), panel.begin());
  line.broadcast(panel, t);
  return owned_part<const T>(panel.data(), tensor.mapping(), owner);
}

template <class Mesh>
void require_square(Mesh& mesh, const char* form) {
  const coordinates<2>& grid = mesh.shape();
  if (grid[0] != grid[1])
    throw mesh_error(mesh.world().world_rank(), "matmul",
                     std::string("SUMMA (") + form + " of block_2d operands) runs on a square q x q grid; the mesh is " +
                         detail::shape_string(grid) + "; build a " + std::to_string(grid[0] * grid[1]) +
                         "-rank 2-D mesh whose sides are equal, or use a 1-D or 3-D product");
}

// C = A·B: both operands move, C stays.
template <class T, class Layout, class Mesh>
[[nodiscard]] dtensor<T, Layout, Mesh> summa_stationary_result(const dtensor<T, Layout, Mesh>& left,
                                                               const dtensor<T, Layout, Mesh>& right) {
  Mesh& mesh = left.mesh();
  dtensor<T, Layout, Mesh> result(mesh, product_extents<false, false>(left, right));
  require_square(mesh, "A*B");
  auto out = result.local();
  for (int t = 0; t < mesh.shape()[0]; ++t) {
    const auto a = broadcast_block(left, 1, t, buffer::left);   // A(i, t) along grid row i
    const auto b = broadcast_block(right, 0, t, buffer::right);  // B(t, j) along grid column j
    multiply<false, false>(mesh.axis(1), out, a, b, t > 0);  // the next panels overwrite a, b
  }
  return result;
}

// C = A·Bᵀ or Aᵀ·B: the transposed operand moves (broadcast along the axis its block index t lies on),
// the other stays, and each rank's addend of the result's block t is reduced along the other axis.
template <bool TransposeLeft, bool TransposeRight, class T, class Layout, class Mesh>
[[nodiscard]] dtensor<T, Layout, Mesh> summa_stationary_operand(const dtensor<T, Layout, Mesh>& left,
                                                                const dtensor<T, Layout, Mesh>& right) {
  static_assert(TransposeLeft != TransposeRight, "shardwise: one operand of this SUMMA form is transposed");
  Mesh& mesh = left.mesh();
  dtensor<T, Layout, Mesh> result(mesh, product_extents<TransposeLeft, TransposeRight>(left, right));
  require_square(mesh, form_name<TransposeLeft, TransposeRight>());
  const dtensor<T, Layout, Mesh>& moving = TransposeRight ? right : left;
  const dtensor<T, Layout, Mesh>& staying = TransposeRight ? left : right;
  // A·Bᵀ: B(t, j) comes down grid column j (axis 0), addends go along grid row i (axis 1) to column t.
  constexpr int broadcast_axis = TransposeRight ? 0 : 1;
  constexpr int reduce_axis = 1 - broadcast_axis;
  auto& reduce_line = mesh.axis(reduce_axis);
  const auto stays = staying.local();
  for (int t = 0; t < mesh.shape()[0]; ++t) {
    const auto moved = broadcast_block(moving, broadcast_axis, t, buffer::left);
    coordinates<2> target = mesh.coords();
    target[static_cast<std::size_t>(reduce_axis)] = t;
    const int owner = mesh.rank_of(target);
    const block_info target_block = result.mapping().block(owner, 0);
    // The addend as the target stores its block: padding zero, so the sum keeps it zero.
    const std::span<T> addend = workspace<T>(buffer::product, static_cast<std::size_t>(target_block.stored_elements()));
    std::ranges::fill(addend, T{});
    if constexpr (TransposeRight) {
      multiply<false, true>(reduce_line, owned_part<T>(addend.data(), result.mapping(), owner), stays, moved, false);
    } else {
      multiply<true, false>(reduce_line, owned_part<T>(addend.data(), result.mapping(), owner), moved, stays, false);
    }
    const bool receives = reduce_line.rank() == t;
    reduce_line.reduce(std::span<const T>(addend), receives ? result.data() : std::span<T>(), op::sum, t);
  }
  return result;
}

template <bool TransposeLeft, bool TransposeRight, class T, class Layout, class Mesh>
[[nodiscard]] auto summa_matmul(const dtensor<T, Layout, Mesh>& left, const dtensor<T, Layout, Mesh>& right) {
  if constexpr (TransposeLeft || TransposeRight) {
    return summa_stationary_operand<TransposeLeft, TransposeRight>(left, right);
  } else {
    return summa_stationary_result(left, right);
  }
}

}  // namespace shardwise::detail
