#pragma once
// Summing addends into the blocks of another layout mapping, over a process_mesh: what redistribute does
// with a partial-sum tensor (tensor/distribute.hpp) and reduce with its final layout (tensor/reduce.hpp).
// Every rank along each pending axis holds an addend of the same block under `from`. Two paths; every
// rank decides from the mappings alone, so all of them take the same one:
//
// 1. One reduce_scatter over a group of pending axes, when in every such group the blocks of the
//    destination tile the addends' block exactly and are stored equally large (tiles_over,
//    tensor/exchange.hpp). The group is all the pending axes together when that holds for them
//    (partial_sum<replicated<>, 0, 1> -> block_2d: each rank of the grid gets the sum of its own block),
//    otherwise one pending axis a: the destination is the addends' layout with a added to a dimension's
//    list — partial_sum<replicated, 0> -> col_1d or row_1d, the 3-D product's local result -> its cube
//    layout. Each rank cuts its addend into the destination blocks of its group, each as its owner
//    stores it (padding zero), and the reduce-scatter leaves every rank the sum of its own block. Other
//    pending axes are all-reduced first. Where the destination blocks are the addend's rows in the
//    group's order (partial_sum<replicated<>, 0> -> col_1d), the addend is already cut, and the
//    reduce-scatter reads it where it is.
// 2. Otherwise one all_reduce over the pending axes, then the exchange of the sums into the destination
//    (tensor/exchange.hpp: a local copy when the destination is the addends' layout or replicated, one
//    all_gather or one all_to_all_v otherwise).
//
// Per rank, path 1 sends and receives (p - 1)/p of the addend, p the group's size, path 2 twice that
// (p the ranks along the pending axes), then what the exchange moves. Path 2 sums in a copy of the
// addends, or in the addends themselves when the caller is done with them (a temporary partial sum).
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "shardwise/comm/reduction.hpp"
#include "shardwise/core/element.hpp"
#include "shardwise/core/shared_buffer.hpp"
#include "shardwise/layout/layout.hpp"
#include "shardwise/layout/mapping_ref.hpp"
#include "shardwise/mesh/shape.hpp"
#include "shardwise/tensor/exchange.hpp"

namespace shardwise::detail {

// What summing addends of a partial_sum<..., Axes...> on a mesh of D dimensions asks of the element type
// and the axes; reduce and redistribute check it where they take one.
template <class T, std::size_t D, std::size_t N>
consteval bool summable(const std::array<std::size_t, N>& pending) {
  static_assert(reducible<T>,
                "shardwise: partial sums are summed on float, double, std::int32_t, std::int64_t and "
                "bf16 elements");
  return std::ranges::all_of(pending, [](std::size_t a) { return a < D; });
}

// Every element of `values` summed over the mesh axes `axes` but those in `except`, in place: one
// all_reduce over the group of ranks along them (the world when they are all the mesh's axes). A rank
// sends 2(p - 1)/p of the values, p the group's size, where an all_reduce along each axis in turn sends
// about that for each axis.
template <class T, class Mesh, std::size_t N>
void sum_along(Mesh& mesh, const std::array<std::size_t, N>& axes, std::span<T> values, const mesh_axes& except = {}) {
  mesh_axes summed;
  for (const std::size_t a : axes)
    if (std::ranges::find(except, static_cast<int>(a)) == except.end()) summed.push_back(static_cast<int>(a));
  if (!summed.empty()) group_along(mesh, summed).all_reduce(values, op::sum);
}

// Whether every rank holds, under `mapping`, the blocks of the rank at coordinate 0 of its line along
// mesh axis b (the mapping replicates along b).
template <std::size_t D>
[[nodiscard]] bool same_blocks_along(mapping_ref mapping, const coordinates<D>& grid, std::size_t b) {
  for (int rank = 0; rank < mapping.ranks(); ++rank) {
    coordinates<D> point = point_in_grid(grid, rank);
    point[b] = 0;
    const int first = rank_in_grid(grid, point);
    if (mapping.block_count(rank) != mapping.block_count(first)) return false;
    for (int block = 0; block < mapping.block_count(rank); ++block)
      if (!(mapping.block(rank, block) == mapping.block(first, block))) return false;
  }
  return true;
}

// The group of pending axes of path 1, or none (empty). The other pending axes are summed over before
// the reduce-scatter, so the ranks along them must cut their addends alike: the destination replicates
// along them.
template <std::size_t D, std::size_t N>
[[nodiscard]] mesh_axes scattering_axes(mapping_ref from, mapping_ref to, const coordinates<D>& grid,
                                        const std::array<std::size_t, N>& pending) {
  mesh_axes cut;  // the pending axes the grid does not leave at one rank
  for (const std::size_t a : pending)
    if (grid[a] > 1) cut.push_back(static_cast<int>(a));
  if (mesh_axes together = cut; together.size() > 1) {
    std::ranges::sort(together);
    if (tiles_over(to, from, grid, together)) return together;
  }
  const auto replicated_along_the_others = [&](int a) {
    return std::ranges::all_of(
        pending, [&](std::size_t b) { return static_cast<int>(b) == a || same_blocks_along(to, grid, b); });
  };
  for (const int a : cut)
    if (tiles_over(to, from, grid, mesh_axes{a}) && replicated_along_the_others(a)) return {a};
  return {};
}

// Path 1's input: this rank's addend (its one block under `from`) cut into the blocks `to` gives the
// ranks of its group along `axes`, each `part_size` elements stored as its owner stores it (padding
// zero), in the group's rank order.
template <class T, class Mesh>
[[nodiscard]] shared_buffer<T> parts_in_group(Mesh& mesh, const mesh_axes& axes, mapping_ref from,
                                              std::span<const T> addend, mapping_ref to, std::size_t part_size,
                                              std::string_view operation) {
  auto parts = shared_buffer<T>::scratch(part_size * static_cast<std::size_t>(group_size(mesh.shape(), axes)));
  const block_info whole = from.block(mesh.world().rank(), 0);
  run_copy<T>(mesh.world(), whole.elements(), operation, [&] {
    for_each_in_group(mesh, axes, to, [&](int k, const block_info& part) {
      if (part.elements() == 0) return;
      copy_rectangle(addend.data() + offset_in(whole, part.row_offset, part.col_offset), whole.stored_cols,
                     parts.data() + static_cast<std::size_t>(k) * part_size, part.stored_cols, part.rows, part.cols);
    });
  });
  return parts;
}

// Path 1 over `mesh`, when the mappings allow it: fills `target` (this rank's blocks under `to`) with the
// sums over the mesh axes `pending` of the addends `addends` (this rank's blocks under `from`), padding
// summed from zeros. Returns whether it did. The reduce-scatter reads the addends where they are when
// they already lie in the group's order (the destination cuts their rows) and nothing is to be summed
// into them first, or `spent` (the addends' own storage, when the caller no longer needs them; else
// empty) may take those sums.
template <class T, class Mesh, std::size_t N>
bool reduce_scatter_sum(Mesh& mesh, mapping_ref from, std::span<const T> addends, std::span<T> spent,
                        const std::array<std::size_t, N>& pending, mapping_ref to, std::span<T> target,
                        std::string_view operation) {
  const mesh_axes axes = scattering_axes(from, to, mesh.shape(), pending);
  if (axes.empty()) return false;
  auto& group = group_along(mesh, axes);
  const bool summed_over_the_group_alone = std::ranges::all_of(
      pending, [&](std::size_t a) { return std::ranges::find(axes, static_cast<int>(a)) != axes.end(); });
  if ((summed_over_the_group_alone || !spent.empty()) &&
      stored_in_group_order(mesh, axes, to, from.block(mesh.world().rank(), 0), target.size(), addends.size())) {
    if (!spent.empty()) sum_along(mesh, pending, spent, axes);
    group.reduce_scatter(addends, target, op::sum);
    return true;
  }
  const auto parts = parts_in_group(mesh, axes, from, addends, to, target.size(), operation);
  sum_along(mesh, pending, parts.span(), axes);
  group.reduce_scatter(std::span<const T>(parts.span()), target, op::sum);
  return true;
}

// Collective over `mesh`: fills `target` with the sums of `addends` as reduce_scatter_sum does, by path 1
// when it applies, else by path 2 on a copy of the addends. Padding in `target` is left untouched by path 2.
template <class T, class Mesh, std::size_t N>
void exchange_sum(Mesh& mesh, mapping_ref from, std::span<const T> addends, const std::array<std::size_t, N>& pending,
                  mapping_ref to, std::span<T> target, std::string_view operation) {
  if (reduce_scatter_sum(mesh, from, addends, std::span<T>{}, pending, to, target, operation)) return;
  const auto sums = shared_buffer<T>::scratch(addends.size());
  run_copy<T>(mesh.world(), static_cast<std::int64_t>(addends.size()), operation,
              [&] { std::ranges::copy(addends, sums.data()); });
  sum_along(mesh, pending, sums.span());
  exchange(mesh, from, std::span<const T>(sums.span()), to, target, operation);
}

// exchange_sum of addends the caller no longer needs: path 2 sums them where they are, with no copy.
template <class T, class Mesh, std::size_t N>
void exchange_spent_sum(Mesh& mesh, mapping_ref from, std::span<T> addends, const std::array<std::size_t, N>& pending,
                        mapping_ref to, std::span<T> target, std::string_view operation) {
  if (reduce_scatter_sum(mesh, from, std::span<const T>(addends), addends, pending, to, target, operation)) return;
  sum_along(mesh, pending, addends);
  exchange(mesh, from, std::span<const T>(addends), to, target, operation);
}

}  // namespace shardwise::detail
