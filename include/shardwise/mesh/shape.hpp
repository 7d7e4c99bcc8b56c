#pragma once
// Grid shapes, without any communicator: the coordinate type, and the ways P ranks can be laid out as a
// D-dimensional grid (every factorisation, or the most nearly cubic one).
#include <algorithm>
#include <array>
#include <cstddef>
#include <functional>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "shardwise/core/error.hpp"

namespace shardwise {

// A point of a D-dimensional grid, or a grid's shape (its extent along each axis).
template <std::size_t Dimensions>
using coordinates = std::array<int, Dimensions>;

// The rank of `point` in a grid of `shape`: row-major, last axis fastest (as MPI_Cart_create and C
// arrays). The one place this order is written; process_mesh and the layouts ask it.
template <std::size_t D>
[[nodiscard]] constexpr int rank_in_grid(const coordinates<D>& shape, const coordinates<D>& point) {
  int rank = 0;
  for (std::size_t a = 0; a < D; ++a) rank = rank * shape[a] + point[a];
  return rank;
}

// The inverse of rank_in_grid.
template <std::size_t D>
[[nodiscard]] constexpr coordinates<D> point_in_grid(const coordinates<D>& shape, int rank) {
  coordinates<D> point{};
  for (std::size_t a = D; a-- > 0;) {
    point[a] = rank % shape[a];
    rank /= shape[a];
  }
  return point;
}

namespace detail {

// A group of mesh axes, in increasing order: the ranks that differ from a rank only along them. A line
// along axis a is the group {a}.
using mesh_axes = std::vector<int>;

// The number of ranks in a group along `axes` of a grid of `shape`.
template <std::size_t D>
[[nodiscard]] int group_size(const coordinates<D>& shape, const mesh_axes& axes) {
  int size = 1;
  for (const int a : axes) size *= shape[static_cast<std::size_t>(a)];
  return size;
}

// The rank of `point` in its group along `axes`: row-major over those axes, in increasing order (what
// process_mesh::group's ranks are). The one place this order is written.
template <std::size_t D>
[[nodiscard]] int rank_in_group(const coordinates<D>& point, const coordinates<D>& shape, const mesh_axes& axes) {
  int rank = 0;
  for (const int a : axes) rank = rank * shape[static_cast<std::size_t>(a)] + point[static_cast<std::size_t>(a)];
  return rank;
}

// The inverse of rank_in_group: the point of rank k in the group along `axes` that `point` lies in.
template <std::size_t D>
[[nodiscard]] coordinates<D> point_in_group(coordinates<D> point, const coordinates<D>& shape, const mesh_axes& axes,
                                            int k) {
  for (auto a = axes.rbegin(); a != axes.rend(); ++a) {
    const int extent = shape[static_cast<std::size_t>(*a)];
    point[static_cast<std::size_t>(*a)] = k % extent;
    k /= extent;
  }
  return point;
}

}  // namespace detail

// Every shape of Dimensions positive extents whose product is `ranks`, in lexicographic order
// ({1, 12}, {2, 6}, {3, 4}, {4, 3}, {6, 2}, {12, 1} for 2-D and 12). Empty when ranks < 1.
template <std::size_t Dimensions>
[[nodiscard]] std::vector<coordinates<Dimensions>> grid_shapes(int ranks) {
  static_assert(Dimensions >= 1, "shardwise: a grid has at least one dimension");
  std::vector<coordinates<Dimensions>> shapes;
  if (ranks < 1) return shapes;
  // Every extent divides `ranks`, so only its divisors are candidates.
  std::vector<int> divisors;
  for (int d = 1; d <= ranks / d; ++d) {
    if (ranks % d != 0) continue;
    divisors.push_back(d);
    if (d != ranks / d) divisors.push_back(ranks / d);
  }
  std::sort(divisors.begin(), divisors.end());

  coordinates<Dimensions> shape{};
  auto fill = [&](auto& self, std::size_t axis, int remaining) -> void {
    if (axis + 1 == Dimensions) {
      shape[axis] = remaining;
      shapes.push_back(shape);
      return;
    }
    for (const int extent : divisors) {
      if (extent > remaining) break;
      if (remaining % extent != 0) continue;
      shape[axis] = extent;
      self(self, axis + 1, remaining / extent);
    }
  };
  fill(fill, 0, ranks);
  return shapes;
}

// The most nearly cubic grid of `ranks` ranks: the least sum of extents (then the least largest
// extent), listed largest first as MPI_Dims_create does: 8 -> 2x2x2, 12 -> 3x2x2, 16 -> 4x2x2, 7 -> 7x1x1.
template <std::size_t Dimensions>
[[nodiscard]] coordinates<Dimensions> balanced_shape(int ranks) {
  if (ranks < 1) throw mesh_error(-1, "balanced_shape", "needs at least one rank, got " + std::to_string(ranks));
  auto shapes = grid_shapes<Dimensions>(ranks);
  auto cost = [](const coordinates<Dimensions>& shape) {
    return std::pair{std::accumulate(shape.begin(), shape.end(), 0LL), *std::max_element(shape.begin(), shape.end())};
  };
  auto best =
      *std::min_element(shapes.begin(), shapes.end(), [&](const auto& a, const auto& b) { return cost(a) < cost(b); });
  std::sort(best.begin(), best.end(), std::greater<>());
  return best;
}

// "2x2x3": how errors and logs print a shape (a grid's extents, a tensor's), for programs to print theirs alike.
template <class Extents>
[[nodiscard]] std::string shape_string(const Extents& shape) {
  std::string text;
  for (const auto extent : shape) {
    if (!text.empty()) text += 'x';
    text += std::to_string(extent);
  }
  return text;
}

namespace detail {

// "(1, 0, 1)": how errors and logs print a point.
template <std::size_t Dimensions>
[[nodiscard]] std::string coords_string(const coordinates<Dimensions>& point) {
  std::string text = "(";
  for (std::size_t a = 0; a < Dimensions; ++a) {
    if (a != 0) text += ", ";
    text += std::to_string(point[a]);
  }
  return text + ')';
}

// "(0, 2)": how errors print a list of mesh axes.
[[nodiscard]] inline std::string axes_string(const std::vector<int>& axes) {
  std::string text = "(";
  for (std::size_t k = 0; k < axes.size(); ++k) text += (k == 0 ? "" : ", ") + std::to_string(axes[k]);
  return text + ')';
}

}  // namespace detail
}  // namespace shardwise
