#pragma once
// vector_3d: a bias or scale vector stored diagonally on a 3-D cube (the 3-D paper, Figure 5). With
// the paper's directions, rank (i, j, l) holds a piece only when j == l, namely
//   b_ji = b[j*n*p + i*n : j*n*p + i*n + n],   n = N / p^2,
// so the vector is cut over (Outer, Across) = (y, x), y-major, and stored only on the Outer == Diagonal
// plane. Each element lives on exactly one rank and every diagonal rank holds one piece: the vector
// costs 1/p^2 of itself per holding rank, nothing elsewhere.
//
// The vector is the columns of the matrix (1 x N); rows, if more than one, are not cut (a stack of
// vectors sharing the layout). The grid may be rectangular, but its Outer and Diagonal extents must be
// equal for a diagonal to exist. The Padding rule cuts the columns (padding.hpp).
//
// The same storage serves both directions of the paper's layers: swapping y and z swaps Outer and
// Diagonal, which are equal where pieces live, so cube_3d names one vector_3d for both (cube_3d.hpp).
#include <cstddef>
#include <cstdint>
#include <string>

#include "shardwise/core/error.hpp"
#include "shardwise/layout/layout.hpp"
#include "shardwise/layout/padding.hpp"
#include "shardwise/mesh/shape.hpp"

namespace shardwise {

template <std::size_t Across = 0, std::size_t Outer = 1, std::size_t Diagonal = 2, padding_rule Padding = exact>
struct vector_3d {
  static_assert(Across < 3 && Outer < 3 && Diagonal < 3 && Across != Outer && Across != Diagonal && Outer != Diagonal,
                "shardwise::vector_3d: Across, Outer and Diagonal must be the three axes 0, 1, 2 of a 3-D mesh, "
                "each named once");
  using padding = Padding;

  template <std::size_t D>
  class mapping {
    static_assert(D == 3, "shardwise::vector_3d: the diagonal vector storage lives on a 3-D mesh");

   public:
    static constexpr bool is_replicated = false;
    static constexpr bool is_balanced = false;  // ranks off the diagonal hold nothing

    mapping(matrix_extents extents, coordinates<3> grid) : extents_(extents), grid_(grid) {
      if (grid_[Outer] != grid_[Diagonal])
        throw mesh_error(-1, "vector_3d",
                         "the grid " + shape_string(grid_) + " has extents " + std::to_string(grid_[Outer]) + " and " +
                             std::to_string(grid_[Diagonal]) + " along axes " + std::to_string(Outer) + " and " +
                             std::to_string(Diagonal) + "; a diagonal needs them equal");
      (void)matrix_elements(extents, -1, "vector_3d");
      detail::check_cut<Padding>(extents_.cols, parts(), "columns",
                                 "a vector over axes (" + std::to_string(Outer) + ", " + std::to_string(Across) +
                                     ") of the grid " + shape_string(grid_));
    }

    [[nodiscard]] matrix_extents extents() const noexcept { return extents_; }
    [[nodiscard]] int ranks() const noexcept { return grid_size(grid_); }
    [[nodiscard]] int replicas() const noexcept { return 1; }
    [[nodiscard]] int block_count(int rank) const {
      const coordinates<3> point = point_in_grid(grid_, rank);
      return point[Outer] == point[Diagonal] ? 1 : 0;
    }

    [[nodiscard]] block_info block(int rank, int b) const {
      detail::check_block(rank, ranks(), b, rank >= 0 && rank < ranks() ? block_count(rank) : 0);
      const coordinates<3> point = point_in_grid(grid_, rank);
      const piece cols =
          Padding::cut(extents_.cols, parts(), std::int64_t{point[Outer]} * grid_[Across] + point[Across]);
      return {0, cols.offset, extents_.rows, cols.extent, extents_.rows, cols.stored};
    }

    [[nodiscard]] location owner(std::int64_t i, std::int64_t j) const {
      detail::check_index(extents_, i, j);
      const piece_index col = Padding::find(extents_.cols, parts(), j);
      coordinates<3> point{};
      point[Outer] = point[Diagonal] = static_cast<int>(col.piece / grid_[Across]);
      point[Across] = static_cast<int>(col.piece % grid_[Across]);
      return {rank_in_grid(grid_, point), 0, i, col.local};
    }

   private:
    [[nodiscard]] std::int64_t parts() const noexcept { return std::int64_t{grid_[Outer]} * grid_[Across]; }

    matrix_extents extents_;
    coordinates<3> grid_;
  };
};

}  // namespace shardwise
