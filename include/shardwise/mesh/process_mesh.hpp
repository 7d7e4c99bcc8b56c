#pragma once
// process_mesh<Communicator, D>: the ranks of a communicator arranged as a grid of D dimensions, with
// one sub-communicator per axis and, on demand, one for any set of axes.
//
//   shardwise::process_mesh mesh(world, {2, 2, 2});     // collective over world
//   auto [i, j, l] = mesh.coords();                       // this rank's place in the grid
//   mesh.z().all_reduce(partial, op::sum);               // sum over the ranks (i, j, 0..1)
//
// Rank order: row-major, LAST axis fastest (as MPI_Cart_create and C arrays). In a 2x2x3 mesh the rank
// at (i, j, l) is (i * 2 + j) * 3 + l. "Rank" means the rank in the communicator the mesh is built
// over; rank_in_grid/point_in_grid in mesh/shape.hpp write this order down, and coords(rank) and
// rank_of(coords) ask them.
//
// Axes: axis(a) holds the ranks that differ from this one only in coordinate a, ordered by that
// coordinate, so axis(a).size() == shape()[a] and axis(a).rank() == coords()[a].
//   3-D, coordinates (i, j, l) as in the 3-D paper: x() = axis(0) varies i, y() = axis(1) varies j,
//        z() = axis(2) varies l.
//   2-D, coordinates (row, column): row() = axis(1), the ranks of my grid row (varying the column
//        index); column() = axis(0), the ranks of my grid column (varying the row index).
//
// Groups: group({a, b, ...}) holds the ranks that differ from this one only in the coordinates of those
// axes; its rank is this rank's place in the sub-grid they span (row-major, the axes in increasing
// order). A training mesh data x (tensor-parallel grid) takes group({1, ..., D-1}) as the
// tensor-parallel group (mesh/data_parallel_mesh.hpp). Made at first use, collectively over the group.
//
// Library traffic: private_axis(a) is a duplicate of axis(a) on which the library's own point-to-point
// messages travel (the rings of ops/collective_matmul.hpp), so no message a user sends on axis(a), with
// any tag, can match one of them — as MPI libraries keep their traffic on a duplicate communicator.
//
// Ownership: the mesh borrows the communicator it is built over, which must outlive it. So the rank
// body keeps using its communicator, and one communicator can carry several meshes (a 2-D and a 3-D
// view of the same ranks). The mesh owns its axis communicators; it is movable, not copyable.
//
// Accounting: traffic() gives the calls and bytes of this rank on the world and on each axis
// (comm/traffic.hpp); the difference of two readings is what the code between them moved.
//
// Every coordinate in rank order, as a range: all_coords(mesh) in mesh/all_coords.hpp (kept apart
// because range-v3 costs every file that includes it about a second of compile time).
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardwise/comm/communicator.hpp"
#include "shardwise/comm/traffic.hpp"
#include "shardwise/core/error.hpp"
#include "shardwise/mesh/shape.hpp"

namespace shardwise {

// This rank's traffic on a mesh: on the communicator it is built over, and on each axis.
template <std::size_t Dimensions>
struct mesh_traffic {
  traffic_count world;
  std::array<traffic_count, Dimensions> axes{};

  // Everything this rank moved: the world and every axis.
  [[nodiscard]] traffic_count total() const noexcept {
    traffic_count sum = world;
    for (const auto& axis : axes) sum += axis;
    return sum;
  }
  friend mesh_traffic operator-(mesh_traffic a, const mesh_traffic& b) noexcept {
    a.world -= b.world;
    for (std::size_t k = 0; k < Dimensions; ++k) a.axes[k] -= b.axes[k];
    return a;
  }
  friend bool operator==(const mesh_traffic&, const mesh_traffic&) = default;
};

template <std::size_t Dimensions>
[[nodiscard]] std::string to_string(const mesh_traffic<Dimensions>& t) {
  std::string text = "world: " + to_string(t.world);
  for (std::size_t a = 0; a < Dimensions; ++a) text += "; axis " + std::to_string(a) + ": " + to_string(t.axes[a]);
  return text;
}

template <class Communicator, std::size_t Dimensions>
class process_mesh {
  static_assert(communicator<Communicator>,
                "shardwise::process_mesh: the first template argument must model shardwise::communicator "
                "(a non-const backend communicator such as threads::communicator or mpi::communicator)");
  static_assert(Dimensions >= 1, "shardwise::process_mesh: a mesh has at least one dimension");

 public:
  using communicator_type = Communicator;
  static constexpr std::size_t dimensions = Dimensions;

  // Collective over `world`: every rank must pass the same shape, whose extents multiply to
  // world.size(). Otherwise every rank throws mesh_error, naming the grid and the size.
  process_mesh(Communicator& world, const coordinates<Dimensions>& shape)
      : world_(&world),
        shape_(checked_shape(world, shape)),
        coords_(coords(world.rank())),
        axes_(split_axes(std::make_index_sequence<Dimensions>{})) {}

  [[nodiscard]] const coordinates<Dimensions>& shape() const noexcept { return shape_; }
  // This rank's coordinates.
  [[nodiscard]] const coordinates<Dimensions>& coords() const noexcept { return coords_; }

  // The coordinates of `rank`; throws mesh_error unless 0 <= rank < world().size().
  [[nodiscard]] coordinates<Dimensions> coords(int rank) const {
    if (rank < 0 || rank >= world_->size())
      fail("process_mesh::coords", "rank " + std::to_string(rank) + " is outside the grid " + shape_string(shape_) +
                                       " of " + std::to_string(world_->size()) + " ranks");
    return point_in_grid(shape_, rank);
  }

  // The rank at `point`; throws mesh_error when a coordinate lies outside the grid.
  [[nodiscard]] int rank_of(const coordinates<Dimensions>& point) const {
    for (std::size_t a = 0; a < Dimensions; ++a) {
      if (point[a] < 0 || point[a] >= shape_[a])
        fail("process_mesh::rank_of", "coordinates " + detail::coords_string(point) + " are outside the grid " +
                                          shape_string(shape_) + " (axis " + std::to_string(a) + ")");
    }
    return rank_in_grid(shape_, point);
  }

  // The communicator the mesh is built over.
  [[nodiscard]] Communicator& world() noexcept { return *world_; }

  // The ranks that differ from this one only in coordinate a (see the top of this file).
  [[nodiscard]] Communicator& axis(int a) {
    if (a < 0 || a >= static_cast<int>(Dimensions))
      fail("process_mesh::axis", "axis " + std::to_string(a) + " does not exist in the " + std::to_string(Dimensions) +
                                     "-D grid " + shape_string(shape_));
    return axes_[static_cast<std::size_t>(a)];
  }

  // A duplicate of axis(a) for the library's own messages (see the top of this file). Made at its first
  // use, which is collective over axis(a): every rank of the axis must reach it in the same call.
  [[nodiscard]] Communicator& private_axis(int a) {
    Communicator& line = axis(a);
    std::optional<Communicator>& duplicate = private_axes_[static_cast<std::size_t>(a)];
    if (!duplicate) duplicate.emplace(line.split(0, line.rank()));
    return *duplicate;
  }

  // The ranks that differ from this one only along `axes` (see the top of this file). Collective over
  // that group at its first use; later calls return the same communicator. Throws mesh_error for an
  // axis outside the grid or named twice.
  [[nodiscard]] Communicator& group(std::initializer_list<int> axes) {
    return group(std::span<const int>(axes.begin(), axes.size()));
  }
  [[nodiscard]] Communicator& group(std::span<const int> axes) {
    std::vector<int> sorted(axes.begin(), axes.end());
    std::ranges::sort(sorted);
    for (std::size_t k = 0; k < sorted.size(); ++k)
      if (sorted[k] < 0 || sorted[k] >= static_cast<int>(Dimensions) || (k > 0 && sorted[k] == sorted[k - 1]))
        fail("process_mesh::group", "the axes " + detail::axes_string(sorted) + " are not distinct axes of the " +
                                        std::to_string(Dimensions) + "-D grid " + shape_string(shape_));
    auto& slot = groups_[sorted];
    if (!slot) {
      // Colour: the group's first rank; key: my place in the sub-grid.
      slot = std::make_unique<Communicator>(world_->split(rank_of(detail::point_in_group(coords_, shape_, sorted, 0)),
                                                          detail::rank_in_group(coords_, shape_, sorted)));
    }
    return *slot;
  }

  [[nodiscard]] Communicator& x() noexcept requires(Dimensions == 3) { return axes_[0]; }
  [[nodiscard]] Communicator& y() noexcept requires(Dimensions == 3) { return axes_[1]; }
  [[nodiscard]] Communicator& z() noexcept requires(Dimensions == 3) { return axes_[2]; }

  [[nodiscard]] Communicator& row() noexcept requires(Dimensions == 2) { return axes_[1]; }
  [[nodiscard]] Communicator& column() noexcept requires(Dimensions == 2) { return axes_[0]; }

  // This rank's calls and bytes so far, on the world and on each axis (with its private duplicate).
  [[nodiscard]] mesh_traffic<Dimensions> traffic() const {
    mesh_traffic<Dimensions> t{world_->traffic(), {}};
    for (std::size_t a = 0; a < Dimensions; ++a) {
      t.axes[a] = axes_[a].traffic();
      if (private_axes_[a]) t.axes[a] += private_axes_[a]->traffic();
    }
    return t;
  }

 private:
  [[noreturn]] void fail(std::string_view operation, const std::string& detail) const {
    throw mesh_error(world_->world_rank(), operation, detail);
  }

  static coordinates<Dimensions> checked_shape(Communicator& world, const coordinates<Dimensions>& shape) {
    const std::string grid = shape_string(shape);
    const std::string size = std::to_string(world.size());
    auto fail = [&](const std::string& detail) { throw mesh_error(world.world_rank(), "process_mesh", detail); };

    // Ranks that disagree would split into mismatched axes and hang later; a max over the extents and
    // over their negations finds any disagreement, and every rank sees it. Checked first, so that the
    // checks after it fail on every rank or on none.
    std::array<std::int64_t, 2 * Dimensions> bounds{};
    for (std::size_t a = 0; a < Dimensions; ++a) {
      bounds[a] = shape[a];
      bounds[Dimensions + a] = -std::int64_t{shape[a]};
    }
    world.all_reduce(bounds, op::max);
    for (std::size_t a = 0; a < Dimensions; ++a)
      if (bounds[a] != -bounds[Dimensions + a])
        fail("ranks disagree on the grid: this rank asked for " + grid + ", but extents along axis " +
             std::to_string(a) + " range from " + std::to_string(-bounds[Dimensions + a]) + " to " +
             std::to_string(bounds[a]) + " (the communicator has " + size + " ranks)");

    // Counted in 64 bits and capped: the extents of a wrong grid may multiply past any int.
    constexpr std::int64_t cap = std::int64_t{std::numeric_limits<int>::max()} + 1;
    std::int64_t product = 1;
    for (std::size_t a = 0; a < Dimensions; ++a) {
      if (shape[a] < 1)
        fail("the grid " + grid + " has a non-positive extent along axis " + std::to_string(a) +
             " (the communicator has " + size + " ranks)");
      product = std::min(cap, product * shape[a]);
    }
    if (product != world.size())
      fail("the grid " + grid + " needs " +
           (product == cap ? "more than " + std::to_string(cap - 1) : std::to_string(product)) +
           " ranks, the communicator has " + size);
    return shape;
  }

  template <std::size_t... A>
  std::array<Communicator, Dimensions> split_axes(std::index_sequence<A...>) {
    // A braced list is evaluated left to right, so every rank splits axis 0, then 1, then 2.
    return {split_along(A)...};
  }

  // Colour: the first rank of my line along axis a; key: my coordinate on it, which becomes my rank.
  Communicator split_along(std::size_t a) {
    auto first = coords_;
    first[a] = 0;
    return world_->split(rank_of(first), coords_[a]);
  }

  Communicator* world_;
  coordinates<Dimensions> shape_;
  coordinates<Dimensions> coords_;
  std::array<Communicator, Dimensions> axes_;
  std::array<std::optional<Communicator>, Dimensions> private_axes_;
  std::map<std::vector<int>, std::unique_ptr<Communicator>> groups_;  // by sorted axes; stable addresses
};

// process_mesh mesh(world, {2, 2, 2}) deduces a 3-D mesh over world's type.
template <class Communicator, std::size_t Dimensions>
process_mesh(Communicator&, const int (&)[Dimensions]) -> process_mesh<Communicator, Dimensions>;

}  // namespace shardwise
