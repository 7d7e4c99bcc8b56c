#pragma once
// What the sources of the layout mapping test share: the element-by-element check of a layout's mapping
// against the layout contract, folded over a list of layouts, and the global shapes it runs on. The
// layouts on 2-D and on 3-D meshes compile in sources of their own (mapping_2d_test.cpp,
// mapping_3d_test.cpp), since each layout's check is an instantiation of its own.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <range/v3/algorithm/equal.hpp>

#include "shardwise/layout/blocks.hpp"
#include "shardwise/layout/check_layout.hpp"
#include "shardwise/layout/layout.hpp"
#include "shardwise/mesh/shape.hpp"

namespace shardwise::testing {

template <std::size_t D>
std::string where(const coordinates<D>& grid, const matrix_extents& shape) {
  return "grid " + shape_string(grid) + ", matrix " + std::to_string(shape.rows) + "x" + std::to_string(shape.cols);
}

// Every property of the layout concept's contract, checked element by element.
template <class Layout, std::size_t D>
void check_mapping(const coordinates<D>& grid, const matrix_extents& shape) {
  SCOPED_TRACE(where(grid, shape));
  const mapping_t<Layout, D> m(shape, grid);
  ASSERT_EQ(m.extents(), shape);
  ASSERT_EQ(m.ranks(), grid_size(grid));
  std::vector<int> held(static_cast<std::size_t>(shape.rows * shape.cols), 0);
  std::vector<int> lowest(held.size(), m.ranks());
  std::vector<std::int64_t> stored(static_cast<std::size_t>(m.ranks()));
  std::vector<placed_block> every_block;
  for (int rank = 0; rank < m.ranks(); ++rank) {
    std::vector<block_info> rank_blocks;
    for (int b = 0; b < m.block_count(rank); ++b) {
      const block_info info = m.block(rank, b);
      rank_blocks.push_back(info);
      every_block.push_back({rank, b, info});
      ASSERT_GE(info.row_offset, 0);
      ASSERT_GE(info.col_offset, 0);
      ASSERT_LE(info.row_offset + info.rows, shape.rows);
      ASSERT_LE(info.col_offset + info.cols, shape.cols);
      ASSERT_GE(info.stored_rows, info.rows);
      ASSERT_GE(info.stored_cols, info.cols);
      stored[static_cast<std::size_t>(rank)] += info.stored_elements();
      for (std::int64_t r = 0; r < info.rows; ++r)
        for (std::int64_t c = 0; c < info.cols; ++c) {
          const auto at = static_cast<std::size_t>((info.row_offset + r) * shape.cols + info.col_offset + c);
          ++held[at];
          lowest[at] = std::min(lowest[at], rank);
        }
    }
    EXPECT_TRUE(ranges::equal(blocks_of(m, rank), rank_blocks)) << "blocks_of rank " << rank;
  }
  EXPECT_TRUE(ranges::equal(all_blocks(m), every_block)) << "all_blocks";
  for (std::int64_t i = 0; i < shape.rows; ++i)
    for (std::int64_t j = 0; j < shape.cols; ++j) {
      const auto at = static_cast<std::size_t>(i * shape.cols + j);
      ASSERT_EQ(held[at], m.replicas()) << "element (" << i << ", " << j << ")";
      const location owner = m.owner(i, j);
      ASSERT_EQ(owner.rank, lowest[at]) << "element (" << i << ", " << j << ")";
      ASSERT_EQ(global_index(m, owner), (std::pair<std::int64_t, std::int64_t>{i, j}));
    }
  if (mapping_t<Layout, D>::is_balanced) {
    EXPECT_TRUE(std::all_of(stored.begin(), stored.end(), [&](std::int64_t s) { return s == stored[0]; }));
  }
  if (!mapping_t<Layout, D>::is_replicated) {
    EXPECT_EQ(m.replicas(), 1);
  }
  EXPECT_NO_THROW(check_layout<Layout>(shape, grid));  // check_layout agrees with the element-by-element check
}

template <class... Layouts, std::size_t D>
void check_all(const coordinates<D>& grid, const matrix_extents& shape) {
  (check_mapping<Layouts, D>(grid, shape), ...);
}

// Random shapes, the same on every run: 1, small primes, and whatever the generator gives.
inline std::vector<matrix_extents> shapes() {
  std::vector<matrix_extents> result{{1, 1}, {1, 13}, {7, 1}, {2, 3}, {17, 31}, {12, 36}};
  std::mt19937 generator(20261122);
  std::uniform_int_distribution<std::int64_t> extent(1, 40);
  for (int k = 0; k < 6; ++k) result.push_back({extent(generator), extent(generator)});
  return result;
}

// Shapes divisible by every part count a grid of `ranks` ranks can form.
inline matrix_extents divisible(const matrix_extents& shape, int ranks) {
  return {shape.rows * ranks, shape.cols * ranks};
}

}  // namespace shardwise::testing
