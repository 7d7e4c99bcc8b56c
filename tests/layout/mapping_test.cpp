// Layout mappings without any communication: for every built-in layout, mesh shapes of 1, 2 and 3
// dimensions and random global shapes (1, primes, shapes that do not divide the grid), every element
// lies in exactly replicas() blocks, owner() names one of them and the way back (global_index) returns
// the element, blocks stay inside the matrix, the padding stays within its rule, balanced layouts store
// equal amounts, and cube_3d stores 1/P of the matrix per rank. Exact layouts reject shapes that do not
// divide, naming the shape, the grid and the rule. The block views (blocks_of, all_blocks) list the
// blocks the mapping gives, in its order. The layouts on 2-D and 3-D meshes compile in sources of their
// own (mapping_2d_test.cpp, mapping_3d_test.cpp; the check they share is in mapping_checks.hpp).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "layout/mapping_checks.hpp"
#include "shardwise/core/checked_arithmetic.hpp"
#include "shardwise/layout/block_cyclic_2d.hpp"
#include "shardwise/layout/check_layout.hpp"
#include "shardwise/layout/cube_3d.hpp"
#include "shardwise/layout/layout.hpp"
#include "shardwise/layout/mapping_ref.hpp"
#include "shardwise/layout/partial_sum.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/layout/vector_3d.hpp"
#include "shardwise/mesh/shape.hpp"
#include "shardwise/tensor/exchange.hpp"
#include "support/messages.hpp"
#include "support/test_layouts.hpp"

namespace {

using namespace shardwise;
using shardwise::testing::breach;
using shardwise::testing::check_all;
using shardwise::testing::divisible;
using shardwise::testing::message_of;
using shardwise::testing::shapes;
using shardwise::testing::test_layout;
using shardwise::testing::where;

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

TEST(layout_mapping, one_dimensional_meshes) {
  for (int p = 1; p <= 8; ++p) {
    const coordinates<1> grid{p};
    for (const auto& shape : shapes()) {
      check_all<replicated<ragged>, row_1d<ragged>, row_1d<padded>, col_1d<ragged>, col_1d<padded>>(grid, shape);
      check_all<row_1d<>, col_1d<>, replicated<>>(grid, divisible(shape, p));
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
  EXPECT_EQ(flatten(std::vector<std::int64_t>{0, 5, 3}), (matrix_extents{0, 3}));
}

// ---- checked arithmetic: sizes that do not fit are refused, in words, instead of wrapping

constexpr std::int64_t two_to_the(int power) { return std::int64_t{1} << power; }

TEST(checked_arithmetic, products_and_sums_that_do_not_fit_are_nothing) {
  constexpr std::int64_t largest = std::numeric_limits<std::int64_t>::max();
  static_assert(product_if_fits(two_to_the(31), two_to_the(31)) == two_to_the(62));
  static_assert(!product_if_fits(two_to_the(40), two_to_the(40)));
  static_assert(!product_if_fits(two_to_the(62), 4) && !product_if_fits(-two_to_the(62), 4));
  static_assert(product_if_fits(-two_to_the(62), 2) == std::numeric_limits<std::int64_t>::min());
  static_assert(sum_if_fits(largest - 1, 1) == largest && !sum_if_fits(largest, 1));
  static_assert(ceil_divide(largest, 2) == two_to_the(62) && ceil_divide(0, 3) == 0 && ceil_divide(7, 7) == 1);
  EXPECT_EQ(checked_count(2147483647, 0, "gather", "MPI_Gatherv"), 2147483647);
  const std::string text =
      message_of<argument_error>([] { (void)checked_count(two_to_the(31), 3, "gather", "MPI_Gatherv"); });
  EXPECT_EQ(text, "[rank 3] gather: 2147483648 elements; MPI_Gatherv counts are int, so at most 2147483647");
  EXPECT_THROW((void)checked_count(-1, 0, "gather", "MPI_Gatherv"), argument_error);
}

TEST(checked_arithmetic, shapes_whose_elements_do_not_fit_are_refused) {
  const coordinates<2> grid{1, 1};
  EXPECT_EQ(
      message_of<argument_error>([&] { (void)mapping_t<replicated<>, 2>({two_to_the(40), two_to_the(40)}, grid); }),
      "[no rank] layout: a 1099511627776x1099511627776 matrix has more elements than fit in 64 bits");
  EXPECT_EQ(message_of<argument_error>([&] { (void)mapping_t<block_2d<padded>, 2>({two_to_the(62), 4}, grid); }),
            "[no rank] layout: a 4611686018427387904x4 matrix has more elements than fit in 64 bits");
  EXPECT_EQ(message_of<argument_error>([&] { (void)mapping_t<row_1d<ragged>, 2>({-3, 4}, grid); }),
            "[no rank] layout: a matrix cannot have -3 rows");
  EXPECT_EQ(message_of<argument_error>([&] { (void)mapping_t<block_cyclic_2d<2>, 2>({5, -1}, grid); }),
            "[no rank] block_cyclic_2d: a matrix cannot have -1 columns");
  EXPECT_THROW((void)(mapping_t<vector_3d<>, 3>({two_to_the(40), two_to_the(40)}, {1, 1, 1})), argument_error);
  // Extents at the edge of int64 cut without overflow (a padded piece is ceil(n / parts), not (n + parts - 1) / parts).
  const std::int64_t largest = std::numeric_limits<std::int64_t>::max();
  const mapping_t<col_1d<padded>, 1> tall({largest, 1}, {2});
  EXPECT_EQ(tall.block(0, 0).stored_rows, two_to_the(62));
  EXPECT_EQ(tall.block(1, 0).rows, two_to_the(62) - 1);
  EXPECT_EQ(tall.owner(largest - 1, 0).rank, 1);
  // More tiles on one rank than block_count's int can count.
  EXPECT_EQ(message_of<argument_error>(
                [] { (void)mapping_t<block_cyclic_2d<1>, 2>({two_to_the(20), two_to_the(20)}, {1, 1}); }),
            "[no rank] block_cyclic_2d: 1099511627776 tiles of 1x1 on rank 0 of 1048576x1048576; block_count counts "
            "are int, so at most 2147483647");
  // A tensor of rank 3 whose elements overflow, and a negative extent.
  EXPECT_EQ(
      message_of<argument_error>([] { (void)flatten(std::vector<std::int64_t>{two_to_the(30), two_to_the(30), 16}); }),
      "[no rank] flatten: a tensor of shape 1073741824x1073741824x16 has more elements than fit in 64 bits");
  EXPECT_EQ(message_of<argument_error>([] { (void)flatten(std::vector<std::int64_t>{4, -2, 3}); }),
            "[no rank] flatten: the shape 4x-2x3 has a negative extent in dimension 1");
}

TEST(checked_arithmetic, blocks_whose_sizes_do_not_fit_are_refused) {
  const block_info huge{0, 0, 2, 2, two_to_the(40), two_to_the(40)};
  EXPECT_EQ(huge.elements(), 4);
  EXPECT_EQ(message_of<argument_error>([&] { (void)huge.stored_elements(); }),
            "[no rank] layout::block: the block at (0, 0) stores 1099511627776x1099511627776 elements, more than fit "
            "in 64 bits");
  // A rank whose blocks each fit but together do not.
  const mapping_t<replicated<>, 1> fits({two_to_the(31), two_to_the(31)}, {1});
  EXPECT_EQ(stored_elements(fits, 0), two_to_the(62));
}

// ---- check_layout: a layout that breaks the contract is named, with the element and the blocks

template <breach B>
std::string breach_message(const matrix_extents& shape = {6, 8}, int ranks = 4) {
  return message_of<layout_error>([&] { check_layout<test_layout<B>>(shape, coordinates<1>{ranks}); });
}

TEST(check_layout, a_layout_that_keeps_the_contract_passes) {
  EXPECT_NO_THROW(check_layout<test_layout<breach::none>>({6, 8}, coordinates<1>{4}));
  EXPECT_NO_THROW(check_layout<test_layout<breach::none>>({0, 8}, coordinates<1>{4}));
  EXPECT_NO_THROW(check_layout<test_layout<breach::none>>({6, 3}, coordinates<1>{4}));  // a rank with no columns
}

TEST(check_layout, names_what_breaks_the_contract) {
  const auto expected = [](const std::string& what) {
    return "[no rank] check_layout: " + what + " (a 6x8 matrix on 4 ranks)";
  };
  EXPECT_EQ(breach_message<breach::shared_block>(),
            expected("element (0, 2) is held by rank 1 block 0 and rank 2 block 0, and the layout does not declare "
                     "replication"));
  EXPECT_EQ(breach_message<breach::missing_block>(), expected("element (0, 6) is held by no rank"));
  EXPECT_EQ(breach_message<breach::overlap>(),
            expected("element (0, 2) is held by rank 0 block 0 (rows 0..5, columns 0..2) and rank 1 block 0 (rows "
                     "0..5, columns 2..3), and the layout does not declare replication"));
  EXPECT_EQ(breach_message<breach::overlap_in_rank>(),
            expected("element (0, 0) is held by rank 0 block 0 (rows 0..5, columns 0..1) and rank 0 block 1 (rows "
                     "0..5, columns 0..2); blocks of one rank must be disjoint"));
  EXPECT_EQ(breach_message<breach::twice_in_rank>(),
            expected("element (0, 0) is held twice by rank 0, in blocks 0 and 1; blocks of one rank must be disjoint"));
  EXPECT_EQ(breach_message<breach::outside>(),
            expected("rank 3 block 0 at (0, 6) of 6x3 elements reaches outside the matrix"));
  EXPECT_EQ(breach_message<breach::stored_too_little>(),
            expected("rank 0 block 0 owns 6x2 elements but stores 6x1; storage holds at least what is owned"));
  EXPECT_EQ(breach_message<breach::stored_too_much>(),
            expected("rank 0 block 0 stores 1099511627776x1099511627776 elements, more than fit in 64 bits"));
  EXPECT_EQ(breach_message<breach::owner_rank>(),
            expected("owner(0, 0) names rank 1 block 0, which holds rows 0..5, columns 2..3"));
  EXPECT_EQ(breach_message<breach::owner_place>(),
            expected("owner(0, 0) places the element at (0, 1) of rank 0 block 0, which holds it at (0, 0)"));
  EXPECT_EQ(breach_message<breach::replicas>(),
            expected("element (0, 0) is held by 1 block (rank 0 block 0), but replicas() is 2; every element lies in "
                     "replicas() blocks"));
  EXPECT_EQ(breach_message<breach::owner_not_lowest>(),
            expected("owner(0, 0) names rank 3, but the lowest rank holding element (0, 0) is rank 0"));
  EXPECT_NO_THROW(check_layout<test_layout<breach::unbalanced>>({6, 8}, coordinates<1>{4}));  // 2 columns each
  EXPECT_EQ(breach_message<breach::unbalanced>({6, 7}),
            "[no rank] check_layout: is_balanced is true, but rank 0 stores 12 elements and rank 3 stores 6 (a 6x7 "
            "matrix on 4 ranks)");
}

// Rectangles, not elements: a 2^20 x 2^20 matrix (10^12 elements) on 27 ranks, or on 3 x 3 ranks in tiles
// of 2^16 (272 blocks), is checked without visiting its elements; a breach in it is still found.
TEST(check_layout, reasons_over_rectangles) {
  const std::int64_t n = two_to_the(20);
  EXPECT_NO_THROW((check_layout<cube_3d<directions<>, ragged>::input>({n + 1, n - 1}, coordinates<3>{3, 3, 3})));
  EXPECT_NO_THROW((check_layout<block_cyclic_2d<two_to_the(16)>>({n, n + 5}, coordinates<2>{3, 3})));
  EXPECT_NO_THROW(check_layout<replicated<>>({n, n}, coordinates<2>{3, 3}));
  EXPECT_EQ(breach_message<breach::shared_block>({n, n}, 27),
            "[no rank] check_layout: element (0, 38837) is held by rank 1 block 0 and rank 2 block 0, and the layout "
            "does not declare replication (a 1048576x1048576 matrix on 27 ranks)");
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

// A mapping_ref answers every question as the mapping it refers to.
template <class Mapping>
void expect_answers_as(const Mapping& mapping) {
  const mapping_ref erased(mapping);
  EXPECT_EQ(erased.extents(), mapping.extents());
  EXPECT_EQ(erased.ranks(), mapping.ranks());
  EXPECT_EQ(erased.is_replicated(), Mapping::is_replicated);
  for (int rank = 0; rank < mapping.ranks(); ++rank) {
    ASSERT_EQ(erased.block_count(rank), mapping.block_count(rank)) << "rank " << rank;
    for (int b = 0; b < mapping.block_count(rank); ++b) EXPECT_EQ(erased.block(rank, b), mapping.block(rank, b));
  }
  for (std::int64_t i = 0; i < mapping.extents().rows; ++i)
    for (std::int64_t j = 0; j < mapping.extents().cols; ++j) EXPECT_EQ(erased.owner(i, j), mapping.owner(i, j));
}

TEST(layout_mapping, mapping_ref_answers_as_its_mapping) {
  const matrix_extents shape{13, 7};
  const coordinates<2> grid{2, 3};
  expect_answers_as(mapping_t<replicated<>, 2>(shape, grid));
  expect_answers_as(mapping_t<row_1d<ragged>, 2>(shape, grid));
  expect_answers_as(mapping_t<block_2d<padded>, 2>(shape, grid));
  expect_answers_as(mapping_t<block_cyclic_2d<2>, 2>(shape, grid));
  expect_answers_as(mapping_t<cube_3d<directions<>, ragged>::input, 3>(shape, coordinates<3>{2, 1, 2}));
}

}  // namespace
