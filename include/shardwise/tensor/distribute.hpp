#pragma once
// Moving a distributed matrix between layouts and to or from one rank. Each is collective over the
// tensor's mesh and takes the cheapest of three paths (tensor/exchange.hpp): none when every rank
// already holds what it needs, one all_gather along a mesh axis when the new layout only drops that
// axis from a dimension, otherwise one all_to_all_v:
//
//   auto a = scatter<block_2d<ragged>>(mesh, whole, /*root*/ 0);  // whole: read on the root only
//   auto b = redistribute<row_1d<padded>>(a);                      // same matrix, new layout
//   Eigen::MatrixXf back = gather(b, 0);                           // whole matrix on rank 0, 0x0 elsewhere
//   auto everywhere = all_gather(b);                               // whole matrix on every rank
//   auto c = slice<block_2d<>>(mesh, everywhere);                  // and back, with no communication
//
// Errors name the call first: "[rank 2] redistribute(row_1d<> → block_2d<>, 7x5): …".
//
// Results are exact: elements are copied, never combined — except that redistribute sums a partial-sum
// tensor (layout/partial_sum.hpp) into the new layout (tensor/exchange_sum.hpp): by one reduce-scatter
// along a pending axis when the new layout cuts the addends' block along it (partial_sum<replicated<>,
// 0> -> col_1d), otherwise by one all-reduce over the pending axes, then the move; into its own final
// layout it is reduce(t) (tensor/reduce.hpp). A temporary partial sum is summed in its own storage, with
// no copy, and into its final layout the result keeps that storage:
//
//   auto y = redistribute<col_1d<>>(matmul(h, v));     // h row_1d, v col_1d: the sum, its rows cut
//   auto z = redistribute<replicated<>>(matmul(h, v));  // the sum on every rank, where the addends were
//
// scatter, gather and all_gather refuse partial sums at compile time (gathering one addend would pass
// for the sum): reduce or redistribute them first (tensor/reduce.hpp); so does redistribute into a
// partial-sum layout. The refusals are deleted overloads, so the compiler's first error names the
// layout ("use of deleted function ... [with ...; Layout = partial_sum<...>]") and its excerpt says why.
#include <Eigen/Core>
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include "shardwise/core/error.hpp"
#include "shardwise/layout/layout.hpp"
#include "shardwise/layout/layout_name.hpp"
#include "shardwise/layout/partial_sum.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/tensor/describe.hpp"
#include "shardwise/tensor/dtensor.hpp"
#include "shardwise/tensor/exchange.hpp"
#include "shardwise/tensor/exchange_sum.hpp"
#include "shardwise/tensor/reduce.hpp"

namespace shardwise {

namespace detail {

template <class Communicator>
void check_root(Communicator& world, int root, std::string_view operation) {
  if (root < 0 || root >= world.size())
    throw argument_error(
        world.world_rank(), operation,
        "root " + std::to_string(root) + " is not a rank of the mesh's " + std::to_string(world.size()) + " ranks");
}

// How an error in redistribute names the call.
template <class NewLayout, class T, class Layout, class Mesh>
[[nodiscard]] std::string redistribute_call(const dtensor<T, Layout, Mesh>& tensor) {
  return call_text("redistribute", layout_name<Layout>() + " → " + layout_name<NewLayout>(),
                   extents_string(tensor.extents()));
}

}  // namespace detail

// Collective: cuts `whole`, read on `root` only (other ranks may pass an empty matrix), into a tensor
// of Layout. The shape comes from the root.
template <class Layout, class Mesh, class T>
[[nodiscard]] dtensor<T, Layout, Mesh> scatter(
    Mesh& mesh, const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>& whole, int root = 0) try {
  auto& world = mesh.world();
  detail::check_root(world, root, "scatter");
  std::array<std::int64_t, 2> shape{whole.rows(), whole.cols()};
  world.broadcast(shape, root);
  dtensor<T, Layout, Mesh> tensor(mesh, {shape[0], shape[1]});
  const std::span<const T> source(whole.data(), world.rank() == root ? static_cast<std::size_t>(whole.size()) : 0);
  detail::exchange(mesh, detail::on_one_rank(tensor.extents(), world.size(), root), source, tensor.mapping(),
                   tensor.data(), "scatter");
  return tensor;
} catch (...) {
  const std::string root_text = "root " + std::to_string(root);
  rethrow_within_call(mesh.world().world_rank(),
                      mesh.world().rank() == root ? call_text("scatter<" + layout_name<Layout>() + ">",
                                                              extents_string({whole.rows(), whole.cols()}), root_text)
                                                  : call_text("scatter<" + layout_name<Layout>() + ">", root_text));
}

// Collective: the whole matrix on `root`; a 0x0 matrix on every other rank.
template <class T, class Layout, class Mesh>
[[nodiscard]] Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> gather(
    const dtensor<T, Layout, Mesh>& tensor, int root = 0) try {
  auto& world = tensor.mesh().world();
  detail::check_root(world, root, "gather");
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> whole;
  if (world.rank() == root) whole.resize(tensor.rows(), tensor.cols());
  detail::exchange(tensor.mesh(), tensor.mapping(), tensor.data(),
                   detail::on_one_rank(tensor.extents(), world.size(), root),
                   std::span<T>(whole.data(), static_cast<std::size_t>(whole.size())), "gather");
  return whole;
} catch (...) {
  rethrow_within_call(world_rank_of(tensor), call_text("gather", describe(tensor), "root " + std::to_string(root)));
}

// Collective: the whole matrix on every rank.
template <class T, class Layout, class Mesh>
[[nodiscard]] Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> all_gather(
    const dtensor<T, Layout, Mesh>& tensor) try {
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> whole(tensor.rows(), tensor.cols());
  const mapping_t<replicated<>, Mesh::dimensions> everywhere(tensor.extents(), tensor.mesh().shape());
  detail::exchange(tensor.mesh(), tensor.mapping(), tensor.data(), everywhere,
                   std::span<T>(whole.data(), static_cast<std::size_t>(whole.size())), "all_gather");
  return whole;
} catch (...) {
  rethrow_within_call(world_rank_of(tensor), call_text("all_gather", describe(tensor)));
}

// Not collective: the tensor of Layout whose blocks this rank cuts from `whole`, a matrix every rank of
// the mesh holds alike (a replicated result, an all-reduced sum). The inverse of all_gather.
template <class Layout, class Mesh, class T>
[[nodiscard]] dtensor<T, Layout, Mesh> slice(
    Mesh& mesh, const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>& whole) {
  dtensor<T, Layout, Mesh> tensor(mesh, {whole.rows(), whole.cols()});
  const mapping_t<replicated<>, Mesh::dimensions> everywhere(tensor.extents(), mesh.shape());
  detail::exchange(mesh, everywhere, std::span<const T>(whole.data(), static_cast<std::size_t>(whole.size())),
                   tensor.mapping(), tensor.data(), "slice");  // every rank holds all: local copies only
  return tensor;
}

// Collective: the same matrix under NewLayout (on the same mesh); of a partial sum, the sum. Throws, on
// every rank, when NewLayout cannot cut the shape (an exact layout and a shape that does not divide).
template <class NewLayout, class T, class Layout, class Mesh>
[[nodiscard]] dtensor<T, NewLayout, Mesh> redistribute(const dtensor<T, Layout, Mesh>& tensor) try {
  if constexpr (std::is_same_v<NewLayout, Layout> && is_partial_sum_v<Layout>) {
    return tensor;  // the addends as they are
  } else if constexpr (is_partial_sum_v<Layout> && std::is_same_v<NewLayout, summed_layout_t<Layout>>) {
    return reduce(tensor);
  } else {
    // Into the same layout too: a copy of the blocks, priced as every copy is.
    dtensor<T, NewLayout, Mesh> moved(tensor.mesh(), tensor.extents());
    if constexpr (is_partial_sum_v<Layout>) {
      static_assert(detail::summable<T, Mesh::dimensions>(Layout::pending_axes),
                    "shardwise::redistribute: the pending sum names a mesh axis the mesh does not have");
      detail::exchange_sum(tensor.mesh(), tensor.mapping(), tensor.data(), Layout::pending_axes, moved.mapping(),
                           moved.data(), "redistribute");
    } else {
      detail::exchange(tensor.mesh(), tensor.mapping(), tensor.data(), moved.mapping(), moved.data(), "redistribute");
    }
    return moved;
  }
} catch (...) {
  rethrow_within_call(world_rank_of(tensor), detail::redistribute_call<NewLayout>(tensor));
}

// A temporary already in NewLayout is the result itself, not a copy of it.
template <class NewLayout, class T, class Layout, class Mesh>
requires std::is_same_v<NewLayout, Layout>
[[nodiscard]] dtensor<T, NewLayout, Mesh> redistribute(dtensor<T, Layout, Mesh>&& tensor) noexcept {
  return std::move(tensor);
}

// A temporary partial sum is summed in its own storage: kept as the result in its final layout
// (reduce), else moved from there into NewLayout's blocks, unless one reduce-scatter does both.
template <class NewLayout, class T, class Layout, class Mesh>
requires(is_partial_sum_v<Layout> && !is_partial_sum_v<NewLayout>)
[[nodiscard]] dtensor<T, NewLayout, Mesh> redistribute(dtensor<T, Layout, Mesh>&& tensor) try {
  if constexpr (std::is_same_v<NewLayout, summed_layout_t<Layout>>) {
    return reduce(std::move(tensor));
  } else {
    // A bound tensor's storage is an update's buffer, which the sum must leave as it is.
    if (tensor.is_bound()) return redistribute<NewLayout>(std::as_const(tensor));
    static_assert(detail::summable<T, Mesh::dimensions>(Layout::pending_axes),
                  "shardwise::redistribute: the pending sum names a mesh axis the mesh does not have");
    dtensor<T, NewLayout, Mesh> moved(tensor.mesh(), tensor.extents());
    detail::exchange_spent_sum(tensor.mesh(), tensor.mapping(), tensor.data(), Layout::pending_axes, moved.mapping(),
                               moved.data(), "redistribute");
    return moved;
  }
} catch (...) {
  rethrow_within_call(world_rank_of(tensor), detail::redistribute_call<NewLayout>(tensor));
}

// Partial sums: the blocks are addends still to be summed over a mesh axis.
template <class Layout, class Mesh, class T>
requires is_partial_sum_v<Layout>
auto scatter(Mesh&,  // every replica would get the values, and the sum would count them once per replica
             const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>&, int = 0) = delete;
template <class T, class Layout, class Mesh>
requires is_partial_sum_v<Layout>
auto gather(const dtensor<T, Layout, Mesh>&, int = 0) = delete;  // passes one addend off as the sum: reduce(t) first
template <class T, class Layout, class Mesh>
requires is_partial_sum_v<Layout>
auto all_gather(const dtensor<T, Layout, Mesh>&) = delete;  // passes one addend off as the sum: reduce(t) first
template <class NewLayout, class T, class Layout, class Mesh>
requires is_partial_sum_v<NewLayout> && (!std::is_same_v<NewLayout, Layout>)
auto redistribute(const dtensor<T, Layout, Mesh>&) = delete;  // addends are no layout to move into: sums come out final

}  // namespace shardwise
