// Layout mappings without any communication: for every built-in layout, mesh shapes of 1, 2 and 3
// dimensions and random global shapes (1, primes, shapes that do not divide the grid), every element
// lies in exactly replicas() blocks, owner() names one of them and the way back (global_index) returns
// the element, blocks stay inside the matrix, the padding stays within its rule, balanced layouts store
// equal amounts, and cube_3d stores 1/P of the matrix per rank. Exact layouts reject shapes that do not
// divide, naming the shape, the grid and the rule.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "shardwise/layout/block_cyclic_2d.hpp"
#include "shardwise/layout/cube_3d.hpp"
#include "shardwise/layout/layout.hpp"
#include "shardwise/layout/partial_sum.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/layout/vector_3d.hpp"
#include "shardwise/tensor/exchange.hpp"

namespace {

using namespace shardwise;

// ---- the concept and the type algebra, at compile time
static_assert(layout<replicated<>, 1> && layout<row_1d<padded>, 3> && layout<col_1d<ragged>, 2>);
static_assert(layout<block_2d<>, 2> && layout<block_cyclic_2d<4, 2>, 2> && layout<vector_3d<>, 3>);
static_assert(layout<cube_3d<>::input, 3> && layout<cube_3d<>::weight, 3> && layout<cube_3d<>::output, 3>);
static_assert(layout<partial_sum<col_1d<>, 1>, 2>);
static_assert(!layout<int, 1> && !layout<std::vector<int>, 2>);
// The 3-D paper's direction swap, as types: a layer's output is the next layer's input; twice is identity.
static_assert(std::is_same_v<cube_3d<>::output, cube_3d<>::swapped::input>);
static_assert(std::is_same_v<cube_3d<>::swapped::swapped, cube_3d<>>);
static_assert(std::is_same_v<cube_3d<>::weight, cube_3d<>::swapped::weight> == false);
static_assert(std::is_same_v<cube_3d<>::vector, cube_3d<>::swapped::vector>);
static_assert(std::is_same_v<cube_3d<>::input, split<rows_over<0, 1>, cols_over<2>>>);
static_assert(mapping_t<row_1d<>, 2>::is_replicated && !mapping_t<block_2d<>, 2>::is_replicated);
static_assert(mapping_t<block_2d<padded>, 2>::is_balanced && !mapping_t<block_2d<ragged>, 2>::is_balanced);

template <std::size_t D>
std::string where(const coordinates<D>& grid, const matrix_extents& shape) {
  return "grid " + detail::shape_string(grid) + ", matrix " + std::to_string(shape.rows) + "x" +
         std::to_string(shape.cols);
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
  for (int rank = 0; rank < m.ranks(); ++rank) {
    for (int b = 0; b < m.block_count(rank); ++b) {
      const block_info info = m.block(rank, b);
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
  }
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
}

template <class... Layouts, std::size_t D>
void check_all(const coordinates<D>& grid, const matrix_extents& shape) {
  (check_mapping<Layouts, D>(grid, shape), ...);
}

// Random shapes, the same on every run: 1, small primes, and whatever the generator gives.
std::vector<matrix_extents> shapes() {
  std::vector<matrix_extents> result{{1, 1}, {1, 13}, {7, 1}, {2, 3}, {17, 31}, {12, 36}};
  std::mt19937 generator(20261122);
  std::uniform_int_distribution<std::int64_t> extent(1, 40);
  for (int k = 0; k < 6; ++k) result.push_back({extent(generator), extent(generator)});
  return result;
}

// Shapes divisible by every part count a grid of `ranks` ranks can form.
matrix_extents divisible(const matrix_extents& shape, int ranks) { return {shape.rows * ranks, shape.cols * ranks}; }

TEST(layout_mapping, one_dimensional_meshes) {
  for (int p = 1; p <= 8; ++p) {
    const coordinates<1> grid{p};
    for (const auto& shape : shapes()) {
      check_all<replicated<ragged>, row_1d<ragged>, row_1d<padded>, col_1d<ragged>, col_1d<padded>>(grid, shape);
      check_all<row_1d<>, col_1d<>, replicated<>>(grid, divisible(shape, p));
    }
  }
}

TEST(layout_mapping, two_dimensional_meshes) {
  for (const coordinates<2> grid :
       {coordinates<2>{2, 2}, coordinates<2>{3, 3}, coordinates<2>{2, 3}, coordinates<2>{1, 4}}) {
    for (const auto& shape : shapes()) {
      check_all<block_2d<ragged>, block_2d<padded>, row_1d<ragged>, col_1d<padded>, replicated<>,
                split<rows_over<1, 0>, cols_over<>, ragged>, block_cyclic_2d<2, 3>, block_cyclic_2d<1>,
                block_cyclic_2d<5, 4>>(grid, shape);
      check_all<block_2d<>, split<rows_over<0, 1>, cols_over<>>>(grid, divisible(shape, grid_size(grid)));
    }
  }
}

TEST(layout_mapping, three_dimensional_meshes) {
  using paper = cube_3d<directions<>, padded>;
  using other = cube_3d<directions<2, 1, 0>, ragged>;
  for (const coordinates<3> grid :
       {coordinates<3>{2, 2, 2}, coordinates<3>{3, 3, 3}, coordinates<3>{2, 3, 1}, coordinates<3>{3, 2, 2}}) {
    for (const auto& shape : shapes()) {
      check_all<paper::input, paper::weight, paper::output, other::input, other::weight, other::output, replicated<>,
                row_1d<ragged>>(grid, shape);
      check_all<cube_3d<>::input, cube_3d<>::weight, cube_3d<>::output>(grid, divisible(shape, grid_size(grid)));
      if (grid[1] == grid[2]) check_all<paper::vector>(grid, shape);  // diagonal of axes 1 and 2
      if (grid[0] == grid[2]) check_all<other::vector>(grid, shape);  // diagonal of axes 0 and 2
    }
  }
}

// The 3-D paper's blocks, written out: A_ijl = A[imp + jm : +m, lnp : +np] on a p x p x p cube.
TEST(layout_mapping, cube_3d_blocks_are_the_papers) {
  const int p = 2;
  const std::int64_t m = 3, n = 5, k = 7;  // M = m p^2, N = n p^2, K = k p^2
  const coordinates<3> grid{p, p, p};
  const mapping_t<cube_3d<>::input, 3> a({m * p * p, n * p * p}, grid);
  const mapping_t<cube_3d<>::weight, 3> b({n * p * p, k * p * p}, grid);
  const mapping_t<cube_3d<>::output, 3> c({m * p * p, k * p * p}, grid);
  const mapping_t<cube_3d<>::vector, 3> v({1, n * p * p}, grid);
  for (int i = 0; i < p; ++i)
    for (int j = 0; j < p; ++j)
      for (int l = 0; l < p; ++l) {
        const int rank = rank_in_grid(grid, {i, j, l});
        EXPECT_EQ(a.block(rank, 0), (block_info{i * m * p + j * m, l * n * p, m, n * p, m, n * p}));
        EXPECT_EQ(b.block(rank, 0), (block_info{l * n * p, j * k * p + i * k, n * p, k, n * p, k}));
        EXPECT_EQ(c.block(rank, 0), (block_info{i * m * p + l * m, j * k * p, m, k * p, m, k * p}));
        ASSERT_EQ(v.block_count(rank), j == l ? 1 : 0);
        if (j == l) {
          EXPECT_EQ(v.block(rank, 0), (block_info{0, j * n * p + i * n, 1, n, 1, n}));
        }
      }
}

// Per-rank memory of a cube_3d matrix is 1/P of it when the shape divides; under padding, at most the
// padded block ceil(M / (p_x p_y)) x ceil(N / p_z) (the rule in layout/padding.hpp).
TEST(layout_mapping, cube_3d_memory_is_one_over_p) {
  for (const coordinates<3> grid : {coordinates<3>{2, 2, 2}, coordinates<3>{3, 3, 3}, coordinates<3>{2, 3, 4}}) {
    const int ranks = grid_size(grid);
    for (const auto& shape : shapes()) {
      SCOPED_TRACE(where(grid, shape));
      const matrix_extents even = divisible(shape, ranks);
      const mapping_t<cube_3d<>::input, 3> exact_a(even, grid);
      const mapping_t<cube_3d<>::weight, 3> exact_b(even, grid);
      const mapping_t<cube_3d<>::output, 3> exact_c(even, grid);
      const mapping_t<cube_3d<directions<>, padded>::input, 3> padded_a(shape, grid);
      const auto ceil = [](std::int64_t n, std::int64_t d) { return (n + d - 1) / d; };
      for (int rank = 0; rank < ranks; ++rank) {
        EXPECT_EQ(stored_elements(exact_a, rank) * ranks, even.rows * even.cols);
        EXPECT_EQ(stored_elements(exact_b, rank) * ranks, even.rows * even.cols);
        EXPECT_EQ(stored_elements(exact_c, rank) * ranks, even.rows * even.cols);
        EXPECT_EQ(stored_elements(padded_a, rank), ceil(shape.rows, grid[0] * grid[1]) * ceil(shape.cols, grid[2]));
      }
    }
  }
}

// An exact layout refuses a shape that does not divide, and says what, over what and under which rule.
TEST(layout_mapping, exact_rejects_shapes_that_do_not_divide) {
  try {
    (void)mapping_t<block_2d<>, 2>({97, 64}, {3, 4});
    FAIL() << "97 rows over 3 parts were accepted";
  } catch (const argument_error& e) {
    const std::string text = e.what();
    for (const char* part : {"97 rows", "3 equal parts", "grid 3x4", "exact"})
      EXPECT_NE(text.find(part), std::string::npos) << "missing \"" << part << "\" in: " << text;
  }
  try {
    (void)mapping_t<cube_3d<>::input, 3>({8, 9}, {2, 2, 2});
    FAIL() << "9 columns over 2 parts were accepted";
  } catch (const argument_error& e) {
    const std::string text = e.what();
    for (const char* part : {"9 columns", "grid 2x2x2", "exact", "(2)"})
      EXPECT_NE(text.find(part), std::string::npos) << "missing \"" << part << "\" in: " << text;
  }
  EXPECT_THROW((void)(mapping_t<vector_3d<>, 3>({1, 12}, {2, 2, 3})), mesh_error);
  EXPECT_THROW((void)(mapping_t<row_1d<ragged>, 1>({2, 2}, {2}).owner(2, 0)), argument_error);
}

// batch x sequence x hidden is laid out as (batch * sequence) x hidden, as the 3-D paper's linear layer.
TEST(layout_mapping, flatten_multiplies_leading_dimensions_into_rows) {
  const std::vector<std::int64_t> activations{4, 8, 16};
  const std::vector<std::int64_t> bias{16};
  EXPECT_EQ(flatten(activations), (matrix_extents{32, 16}));
  EXPECT_EQ(flatten(bias), (matrix_extents{1, 16}));
  EXPECT_EQ(flatten({}), (matrix_extents{1, 1}));
}

// redistribute's fast path: slicing what a rank already holds needs no communication; anything that
// moves data between ranks does.
TEST(layout_mapping, redistribution_without_communication_is_recognised) {
  const matrix_extents shape{13, 7};
  const coordinates<2> grid{2, 3};
  const mapping_t<replicated<>, 2> everywhere(shape, grid);
  const mapping_t<row_1d<ragged>, 2> columns(shape, grid);  // replicated over axis 1
  const mapping_t<block_2d<ragged>, 2> blocks(shape, grid);
  const mapping_t<block_cyclic_2d<2>, 2> tiles(shape, grid);
  EXPECT_TRUE(detail::needs_no_communication(everywhere, blocks));
  EXPECT_TRUE(detail::needs_no_communication(everywhere, tiles));
  EXPECT_TRUE(detail::needs_no_communication(blocks, blocks));
  EXPECT_FALSE(detail::needs_no_communication(columns, blocks));  // columns cut over axis 0, not axis 1
  EXPECT_FALSE(detail::needs_no_communication(blocks, columns));
  EXPECT_FALSE(detail::needs_no_communication(blocks, everywhere));
  EXPECT_FALSE(detail::needs_no_communication(tiles, blocks));
  const mapping_t<col_1d<ragged>, 2> rows(shape, grid);  // rows over axis 0, replicated over axis 1
  EXPECT_TRUE(detail::needs_no_communication(rows, blocks));
}

}  // namespace
