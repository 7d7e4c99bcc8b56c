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
// Step t+1's broadcasts are started before step t's product, so they travel during it, unless asked to
// broadcast and multiply in turn (summa_broadcasts, matmul_options::summa).
//
// Any padding rule and shape: operands cut the dimension they share over q parts with one rule, so
// the pieces line up; broadcasts carry the root's stored block (its size known to every rank from the
// layout), and only owned elements are multiplied. A grid that is not square throws mesh_error.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include "shardwise/comm/reduction.hpp"
#include "shardwise/core/error.hpp"
#include "shardwise/core/kernel.hpp"
#include "shardwise/core/work.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/ops/local_product.hpp"
#include "shardwise/tensor/dtensor.hpp"

namespace shardwise {

// When SUMMA broadcasts each step's panels: `ahead`, step t+1's started before step t's product, so
// that they travel during it (two panels of each moving operand in workspace), or `in_turn`, each
// step's broadcast and then its product (one panel; Optimus's SUMMA as Colossal-AI first released it,
// which the 3-D paper's 2-D rows ran).
enum class summa_broadcasts { ahead, in_turn };

}  // namespace shardwise

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

// The rank of this rank's line along `axis` whose coordinate there is t: on rank (i, j), rank (i, t)
// along axis 1 (grid row i), rank (t, j) along axis 0 (grid column j).
template <class Mesh>
[[nodiscard]] int rank_on_line(Mesh& mesh, int axis, int t) {
  coordinates<2> point = mesh.coords();
  point[static_cast<std::size_t>(axis)] = t;
  return mesh.rank_of(point);
}

// The panels of a SUMMA operand: at step t, block (i, t) or (t, j) of `tensor` (this rank's coordinate
// `axis` replaced by t), copied into a slot by its owner, rank t of the line along `axis`, and
// broadcast along that line. Broadcasting ahead, two slots, so that step t+1's panel travels while step
// t's is multiplied: start(t + 1) before wait(t), once step t−1's product has freed its slot. In turn,
// one slot: start(t), then wait(t).
template <class T, class Layout, class Mesh>
class summa_panels {
  using line_type = std::remove_cvref_t<decltype(std::declval<Mesh&>().axis(0))>;

 public:
  summa_panels(const dtensor<T, Layout, Mesh>& tensor, int axis, buffer which, summa_broadcasts when)
      : tensor_(&tensor),
        axis_(axis),
        line_(&tensor.mesh().axis(axis)),
        slot_count_(when == summa_broadcasts::ahead ? 2 : 1) {
    for (int t = 0; t < line_->size(); ++t) slot_elements_ = std::max(slot_elements_, stored_elements(t));
    slots_ = workspace<T>(which, static_cast<std::size_t>(slot_count_) * slot_elements_);
  }

  // How many steps ahead of its product a step's broadcast is started: 1 ahead (step 0's before the
  // first product), 0 in turn.
  [[nodiscard]] int lead() const { return slot_count_ - 1; }

  void start(int t) {
    const std::span<T> panel = slot(t);
    if (line_->rank() == t)
      run_copy<T>(*line_, static_cast<std::int64_t>(tensor_->data().size()), "SUMMA panel",
                  [&] { std::ranges::copy(tensor_->data(), panel.begin()); });
    in_flight_[static_cast<std::size_t>(t % slot_count_)].emplace(line_->ibroadcast(panel, t));
  }

  [[nodiscard]] strided_map<const T> wait(int t) {
    auto& arriving = in_flight_[static_cast<std::size_t>(t % slot_count_)];
    arriving->wait();
    arriving.reset();
    return owned_part<const T>(slot(t).data(), tensor_->mapping(), owner(t));
  }

 private:
  [[nodiscard]] int owner(int t) const { return rank_on_line(tensor_->mesh(), axis_, t); }
  [[nodiscard]] std::size_t stored_elements(int t) const {
    return static_cast<std::size_t>(tensor_->mapping().block(owner(t), 0).stored_elements());
  }
  [[nodiscard]] std::span<T> slot(int t) const {
    return slots_.subspan(static_cast<std::size_t>(t % slot_count_) * slot_elements_, stored_elements(t));
  }

  const dtensor<T, Layout, Mesh>* tensor_;
  int axis_;
  line_type* line_;
  int slot_count_;
  std::size_t slot_elements_ = 0;
  std::span<T> slots_;
  std::array<std::optional<typename line_type::request>, 2> in_flight_;
};

template <class Mesh>
void require_square(Mesh& mesh, const char* form) {
  const coordinates<2>& grid = mesh.shape();
  if (grid[0] != grid[1])
    throw mesh_error(mesh.world().world_rank(), "matmul",
                     std::string("SUMMA (") + form +
                         " of block_2d operands) runs on a square q x q grid; the mesh is " + shape_string(grid) +
                         "; build a " + std::to_string(grid[0] * grid[1]) +
                         "-rank 2-D mesh whose sides are equal, or use a 1-D or 3-D product");
}

// C = A·B: both operands move, C stays.
template <class T, class Layout, class Mesh>
[[nodiscard]] dtensor<T, Layout, Mesh> summa_stationary_result(const dtensor<T, Layout, Mesh>& left,
                                                               const dtensor<T, Layout, Mesh>& right,
                                                               summa_broadcasts when) {
  Mesh& mesh = left.mesh();
  dtensor<T, Layout, Mesh> result(mesh, product_extents<false, false>(left, right));
  require_square(mesh, "A*B");
  auto c_ij = result.local();
  // A(i, t) -> every rank of grid row i: broadcast along axis 1 from column t
  summa_panels a(left, 1, buffer::left, when);
  // B(t, j) -> every rank of grid column j: broadcast along axis 0 from row t
  summa_panels b(right, 0, buffer::right, when);
  const int q = mesh.shape()[0];
  const int lead = a.lead();
  for (int t = 0; t < lead; ++t) {
    a.start(t);
    b.start(t);
  }
  for (int t = 0; t < q; ++t) {
    if (t + lead < q) {
      a.start(t + lead);
      b.start(t + lead);
    }
    const auto a_it = a.wait(t);
    const auto b_tj = b.wait(t);
    // C(i, j) += A(i, t)·B(t, j)
    multiply<false, false>(mesh.axis(1), c_ij, a_it, b_tj, t > 0);
  }
  return result;
}

// C = A·Bᵀ or Aᵀ·B: the transposed operand moves (broadcast along the axis its block index t lies on),
// the other stays, and each rank's addend of the result's block t is reduced along the other axis.
template <bool TransposeLeft, bool TransposeRight, class T, class Layout, class Mesh>
[[nodiscard]] dtensor<T, Layout, Mesh> summa_stationary_operand(const dtensor<T, Layout, Mesh>& left,
                                                                const dtensor<T, Layout, Mesh>& right,
                                                                summa_broadcasts when) {
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
  // A·Bᵀ: B(t, j) -> grid column j, along axis 0 from row t.  Aᵀ·B: A(i, t) -> grid row i, along axis 1
  summa_panels panels(moving, broadcast_axis, buffer::left, when);
  const int q = mesh.shape()[0];
  const int lead = panels.lead();
  for (int t = 0; t < lead; ++t) panels.start(t);
  for (int t = 0; t < q; ++t) {
    if (t + lead < q) panels.start(t + lead);
    const auto moved = panels.wait(t);
    // A·Bᵀ: A(i, j)·B(t, j)ᵀ, rank (i, j)'s addend of C(i, t).  Aᵀ·B: A(i, t)ᵀ·B(i, j), its addend of C(t, j).
    // Stored as the block's owner stores it, padding zero, so that the sum keeps the padding zero.
    const int owner = rank_on_line(mesh, reduce_axis, t);
    const std::span<T> addend =
        workspace<T>(buffer::product, static_cast<std::size_t>(result.mapping().block(owner, 0).stored_elements()));
    run_kernel(reduce_line, fill_work(static_cast<double>(addend.size_bytes())), "SUMMA addend zero",
               [&] { std::ranges::fill(addend, T{}); });
    strided_map<T> owned = owned_part<T>(addend.data(), result.mapping(), owner);
    if constexpr (TransposeRight) {
      multiply<false, true>(reduce_line, owned, stays, moved, false);
    } else {
      multiply<true, false>(reduce_line, owned, moved, stays, false);
    }
    // A·Bᵀ: C(i, t) = Σ_j addends, reduced along grid row i to column t.  Aᵀ·B: C(t, j) along column j to row t
    const bool receives = reduce_line.rank() == t;
    reduce_line.reduce(std::span<const T>(addend), receives ? result.data() : std::span<T>(), op::sum, t);
  }
  return result;
}

template <bool TransposeLeft, bool TransposeRight, class T, class Layout, class Mesh>
[[nodiscard]] auto summa_matmul(const dtensor<T, Layout, Mesh>& left, const dtensor<T, Layout, Mesh>& right,
                                summa_broadcasts when) {
  if constexpr (TransposeLeft || TransposeRight) {
    return summa_stationary_operand<TransposeLeft, TransposeRight>(left, right, when);
  } else {
    return summa_stationary_result(left, right, when);
  }
}

}  // namespace shardwise::detail
