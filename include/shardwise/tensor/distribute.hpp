#pragma once
// Moving a distributed matrix between layouts and to or from one rank. Each is collective over the
// tensor's mesh and goes through one all_to_all_v (tensor/exchange.hpp), or none when every rank
// already holds what it needs:
//
//   auto a = scatter<block_2d<ragged>>(mesh, whole, /*root*/ 0);  // whole: read on the root only
//   auto b = redistribute<row_1d<padded>>(a);                      // same matrix, new layout
//   Eigen::MatrixXf back = gather(b, 0);                           // whole matrix on rank 0, 0x0 elsewhere
//   auto everywhere = all_gather(b);                               // whole matrix on every rank
//
// Results are exact: elements are copied, never combined. Partial-sum tensors are refused at compile
// time (gathering one addend would pass for the sum): reduce them first (tensor/reduce.hpp).
#include <Eigen/Core>
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>

#include "shardwise/core/error.hpp"
#include "shardwise/layout/layout.hpp"
#include "shardwise/layout/partial_sum.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/tensor/dtensor.hpp"
#include "shardwise/tensor/exchange.hpp"

namespace shardwise {

namespace detail {

template <class Layout>
constexpr void require_final() {
  static_assert(!is_partial_sum_v<Layout>,
                "shardwise: this tensor holds partial sums (its blocks are addends still to be summed over a mesh "
                "axis); gathering or redistributing them would pass one addend off as the sum: call reduce(t) first");
}

template <class Communicator>
void check_root(Communicator& world, int root, std::string_view operation) {
  if (root < 0 || root >= world.size())
    throw argument_error(
        world.world_rank(), operation,
        "root " + std::to_string(root) + " is not a rank of the mesh's " + std::to_string(world.size()) + " ranks");
}

}  // namespace detail

// Collective: cuts `whole`, read on `root` only (other ranks may pass an empty matrix), into a tensor
// of Layout. The shape comes from the root.
template <class Layout, class Mesh, class T>
[[nodiscard]] dtensor<T, Layout, Mesh> scatter(
    Mesh& mesh, const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>& whole, int root = 0) {
  detail::require_final<Layout>();
  auto& world = mesh.world();
  detail::check_root(world, root, "scatter");
  std::array<std::int64_t, 2> shape{whole.rows(), whole.cols()};
  world.broadcast(shape, root);
  dtensor<T, Layout, Mesh> tensor(mesh, {shape[0], shape[1]});
  const std::span<const T> source(whole.data(), world.rank() == root ? static_cast<std::size_t>(whole.size()) : 0);
  detail::exchange(world, detail::on_one_rank(tensor.extents(), world.size(), root), source, tensor.mapping(),
                   tensor.data(), "scatter");
  return tensor;
}

// Collective: the whole matrix on `root`; a 0x0 matrix on every other rank.
template <class T, class Layout, class Mesh>
[[nodiscard]] Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> gather(
    const dtensor<T, Layout, Mesh>& tensor, int root = 0) {
  detail::require_final<Layout>();
  auto& world = tensor.mesh().world();
  detail::check_root(world, root, "gather");
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> whole;
  if (world.rank() == root) whole.resize(tensor.rows(), tensor.cols());
  detail::exchange(world, tensor.mapping(), tensor.data(), detail::on_one_rank(tensor.extents(), world.size(), root),
                   std::span<T>(whole.data(), static_cast<std::size_t>(whole.size())), "gather");
  return whole;
}

// Collective: the whole matrix on every rank.
template <class T, class Layout, class Mesh>
[[nodiscard]] Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> all_gather(
    const dtensor<T, Layout, Mesh>& tensor) {
  detail::require_final<Layout>();
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> whole(tensor.rows(), tensor.cols());
  const mapping_t<replicated<>, Mesh::dimensions> everywhere(tensor.extents(), tensor.mesh().shape());
  detail::exchange(tensor.mesh().world(), tensor.mapping(), tensor.data(), everywhere,
                   std::span<T>(whole.data(), static_cast<std::size_t>(whole.size())), "all_gather");
  return whole;
}

// Collective: the same matrix under NewLayout (on the same mesh). Throws, on every rank, when
// NewLayout cannot cut the shape (an exact layout and a shape that does not divide).
template <class NewLayout, class T, class Layout, class Mesh>
[[nodiscard]] dtensor<T, NewLayout, Mesh> redistribute(const dtensor<T, Layout, Mesh>& tensor) {
  detail::require_final<Layout>();
  detail::require_final<NewLayout>();
  if constexpr (std::is_same_v<NewLayout, Layout>) {
    return tensor;
  } else {
    dtensor<T, NewLayout, Mesh> moved(tensor.mesh(), tensor.extents());
    detail::exchange(tensor.mesh().world(), tensor.mapping(), tensor.data(), moved.mapping(), moved.data(),
                     "redistribute");
    return moved;
  }
}

}  // namespace shardwise
