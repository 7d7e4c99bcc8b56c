#pragma once
// block_cyclic_2d<RowBlock, ColBlock>: ScaLAPACK's distribution on a p_r x p_c grid. The matrix is
// tiled into RowBlock x ColBlock blocks (the last row and column of tiles may be smaller), and tile
// (I, J) lives on rank (I mod p_r, J mod p_c). A rank holds many tiles; they are its blocks, numbered
// row-major over its own tiles.
//
// Written against the public layout concept only (layout.hpp), as a user would write a layout: it is
// not a split<...>, and dtensor, scatter, gather and redistribute take it like any other.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "shardwise/core/checked_arithmetic.hpp"
#include "shardwise/layout/layout.hpp"
#include "shardwise/mesh/shape.hpp"

namespace shardwise {

template <std::int64_t RowBlock, std::int64_t ColBlock = RowBlock>
struct block_cyclic_2d {
  static_assert(RowBlock > 0 && ColBlock > 0, "shardwise::block_cyclic_2d: tiles must have positive extents");

  template <std::size_t D>
  class mapping {
    static_assert(D == 2, "shardwise::block_cyclic_2d: the block-cyclic distribution lives on a 2-D mesh");

   public:
    static constexpr bool is_replicated = false;
    static constexpr bool is_balanced = false;

    // Rank 0 holds the most tiles; their number must fit the int that block_count returns.
    mapping(matrix_extents extents, coordinates<2> grid) : extents_(extents), grid_(grid) {
      (void)matrix_elements(extents, -1, "block_cyclic_2d");
      const std::int64_t most = my_tiles(tiles(extents.rows, RowBlock), grid[0], 0) *
                                my_tiles(tiles(extents.cols, ColBlock), grid[1], 0);  // <= the elements
      (void)checked_count(most, -1, "block_cyclic_2d", "block_count",
                          "tiles of " + std::to_string(RowBlock) + "x" + std::to_string(ColBlock) + " on rank 0 of " +
                              extents_string(extents));
    }

    [[nodiscard]] matrix_extents extents() const noexcept { return extents_; }
    [[nodiscard]] int ranks() const noexcept { return grid_[0] * grid_[1]; }
    [[nodiscard]] int replicas() const noexcept { return 1; }
    [[nodiscard]] int block_count(int rank) const {
      const coordinates<2> point = point_in_grid(grid_, rank);
      return static_cast<int>(my_tiles(tiles(extents_.rows, RowBlock), grid_[0], point[0]) *
                              my_tiles(tiles(extents_.cols, ColBlock), grid_[1], point[1]));
    }

    [[nodiscard]] block_info block(int rank, int b) const {
      detail::check_block(rank, ranks(), b, rank >= 0 && rank < ranks() ? block_count(rank) : 0);
      const coordinates<2> point = point_in_grid(grid_, rank);
      const std::int64_t across = my_tiles(tiles(extents_.cols, ColBlock), grid_[1], point[1]);
      const std::int64_t tile_row = point[0] + (b / across) * grid_[0];
      const std::int64_t tile_col = point[1] + (b % across) * grid_[1];
      const std::int64_t rows = std::min(RowBlock, extents_.rows - tile_row * RowBlock);
      const std::int64_t cols = std::min(ColBlock, extents_.cols - tile_col * ColBlock);
      return {tile_row * RowBlock, tile_col * ColBlock, rows, cols, rows, cols};
    }

    [[nodiscard]] location owner(std::int64_t i, std::int64_t j) const {
      detail::check_index(extents_, i, j);
      const std::int64_t tile_row = i / RowBlock;
      const std::int64_t tile_col = j / ColBlock;
      const coordinates<2> point{static_cast<int>(tile_row % grid_[0]), static_cast<int>(tile_col % grid_[1])};
      const std::int64_t across = my_tiles(tiles(extents_.cols, ColBlock), grid_[1], point[1]);
      const auto b = static_cast<int>((tile_row / grid_[0]) * across + tile_col / grid_[1]);
      return {rank_in_grid(grid_, point), b, i % RowBlock, j % ColBlock};
    }

   private:
    static std::int64_t tiles(std::int64_t extent, std::int64_t tile) { return ceil_divide(extent, tile); }
    // How many of `count` tiles, dealt round-robin to `ranks` ranks, land on rank `r`.
    static std::int64_t my_tiles(std::int64_t count, int ranks, int r) {
      return count > r ? ceil_divide(count - r, ranks) : 0;
    }

    matrix_extents extents_;
    coordinates<2> grid_;
  };
};

}  // namespace shardwise
