#pragma once
// Every coordinate of a grid in rank order, as a lazy, sized, random-access range of coordinates<D>:
//
//   for (const auto& point : shardwise::all_coords(mesh)) ... mesh.rank_of(point) counts 0, 1, 2, ...
//
// Kept out of process_mesh.hpp: range-v3 costs every file that includes it about a second.
#include <cstddef>
#include <string>
#include <tuple>
#include <utility>

#include <range/v3/view/cartesian_product.hpp>
#include <range/v3/view/iota.hpp>
#include <range/v3/view/transform.hpp>

#include "shardwise/core/error.hpp"
#include "shardwise/mesh/shape.hpp"

namespace shardwise {

// A grid with a zero extent has no coordinates; a negative extent throws mesh_error.
template <std::size_t Dimensions>
[[nodiscard]] auto all_coords(const coordinates<Dimensions>& shape) {
  for (std::size_t a = 0; a < Dimensions; ++a)
    if (shape[a] < 0) throw mesh_error(-1, "all_coords", "the grid " + shape_string(shape) + " has a negative extent");
  // cartesian_product varies its last range fastest: the rank order of process_mesh.
  return [&]<std::size_t... A>(std::index_sequence<A...>) {
    return ranges::views::cartesian_product(ranges::views::iota(0, shape[A])...) |
           ranges::views::transform([](const auto& point) { return coordinates<Dimensions>{std::get<A>(point)...}; });
  }(std::make_index_sequence<Dimensions>{});
}

// The coordinates of a process_mesh (or anything with a shape()), in its rank order.
template <class Mesh>
requires requires(const Mesh& mesh) { all_coords(mesh.shape()); } [[nodiscard]] auto all_coords(const Mesh& mesh) {
  return all_coords(mesh.shape());
}

}  // namespace shardwise
