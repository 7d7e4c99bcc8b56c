// The redistribute test (redistribute_test.cpp) on 2-D meshes: the paths, and partial sums of 2-D layouts
// (redistribute_checks.hpp), compiled on their own.
#include <gtest/gtest.h>

#include <optional>

#include "shardwise/layout/partial_sum.hpp"
#include "shardwise/layout/split.hpp"
#include "tensor/redistribute_checks.hpp"

namespace {

using namespace shardwise;
using namespace shardwise::testing;

TYPED_TEST(redistribute_test, two_dimensional_paths) {
  TypeParam::run(
      [](communicator auto& world) {
        on_counted_mesh<2>(world, [](auto& mesh, const matrix_extents& divisible) {
          const int p = mesh.world().size();
          using rows_over_both = split<rows_over<0, 1>, cols_over<>>;
          using cols_over_both = split<rows_over<>, cols_over<0, 1>>;
          // Dropping the last axis of a dimension's list: an all_gather along it, rows or columns.
          check<rows_over_both, col_1d<>>(mesh, divisible, path::all_gather, 1);
          check<cols_over_both, row_1d<>>(mesh, divisible, path::all_gather, 1);
          check<block_2d<>, col_1d<>>(mesh, divisible, path::all_gather, 1);
          check<block_2d<>, split<rows_over<>, cols_over<1>>>(mesh, divisible, path::all_gather, 0);
          // A source replicated along one axis gathers along the other: the copies along the first do not
          // tile anything (each line along axis 0 below holds one column piece twice).
          check<split<rows_over<>, cols_over<1>>, replicated<>>(mesh, divisible, path::all_gather, 1);
          check<col_1d<>, replicated<>>(mesh, divisible, path::all_gather, 0);
          // Pieces that tile the matrix only over the whole grid: one all_gather on the world.
          check<block_2d<>, replicated<>>(mesh, divisible, path::all_gather);
          check<block_2d<padded>, replicated<>>(mesh, {2 * p + 1, 5}, path::all_gather);
          // Padded: with b = ceil(n / P), the pieces along axis 1 tile a piece of rows_over<0> when
          // p1 * b == ceil(n / p0): n = 2P - 1 does, n = 2P + 1 does not.
          using padded_rows_over_both = split<rows_over<0, 1>, cols_over<>, padded>;
          check<padded_rows_over_both, col_1d<padded>>(mesh, {2 * p - 1, 3}, path::all_gather, 1);
          check<padded_rows_over_both, col_1d<padded>>(mesh, {2 * p + 1, 3}, path::all_to_all_v);
          // Dropping the first axis of (0, 1): the pieces of one line are not contiguous.
          check<rows_over_both, split<rows_over<1>, cols_over<>>>(mesh, divisible, path::all_to_all_v);
          // Adding axes: each rank already holds its new block.
          check<col_1d<>, rows_over_both>(mesh, divisible, path::local);
          check<col_1d<padded>, block_2d<padded>>(mesh, {2 * p + 1, 5}, path::local);
          check<replicated<>, block_2d<ragged>>(mesh, {7, 5}, path::local);
        });
      },
      {4, 6, 9});
}

TYPED_TEST(redistribute_test, two_dimensional_partial_sums) {
  TypeParam::run(
      [](communicator auto& world) {
        on_counted_mesh<2>(world, [](auto& mesh, const matrix_extents& divisible) {
          const int p = mesh.world().size();
          using rows_cut = partial_sum<col_1d<>, 1>;                          // rows over axis 0, summed over 1
          using cols_cut = partial_sum<split<rows_over<>, cols_over<1>>, 0>;  // columns over axis 1, summed over 0
          check_sum<rows_cut, block_2d<>>(mesh, divisible, reduce_scatter_along(1));
          check_sum<cols_cut, block_2d<>>(mesh, divisible, reduce_scatter_along(0));
          check_sum<rows_cut, split<rows_over<0, 1>, cols_over<>>>(mesh, divisible, reduce_scatter_along(1));
          // Axis 1 first in the rows' list: the pieces along it are not contiguous.
          check_sum<rows_cut, split<rows_over<1, 0>, cols_over<>>>(mesh, divisible, all_reduce_along({1}, -1, true));
          check_sum<rows_cut, replicated<>>(mesh, divisible, all_reduce_along({1}, 0));
          check_sum<rows_cut, col_1d<>>(mesh, divisible, all_reduce_along({1}));  // what reduce(t) gives
          // Two pending axes: one reduce-scatter over both when the new layout's blocks tile the matrix
          // over the grid (a language model head's hidden-state gradient in 2-D); a reduce-scatter along
          // the one the new layout cuts when it replicates along the other; else one all-reduce over both.
          using both = partial_sum<replicated<>, 0, 1>;
          check_sum<both, block_2d<>>(mesh, divisible, reduce_scatter_over_the_world());
          check_sum<both, col_1d<>>(mesh, divisible, reduce_scatter_along(0, {1}));
          check_sum<both, split<rows_over<>, cols_over<1>>>(mesh, divisible, reduce_scatter_along(1, {0}));
          check_sum<both, block_2d<ragged>>(mesh, {7, 2 * p - 1}, all_reduce_over_the_world());  // stored unequally
          using block_2d_padded = block_2d<padded>;
          check_sum<partial_sum<col_1d<padded>, 1>, block_2d_padded>(mesh, {2 * p + 1, 5}, std::nullopt);
          check_sum<partial_sum<col_1d<ragged>, 1>, block_2d<ragged>>(mesh, {7, 2 * p - 1}, std::nullopt);
        });
      },
      {4, 6, 9});
}

// The 2-D cases of one_dimensional_rows_are_gathered_and_summed_where_they_are (redistribute_test.cpp):
// rows over both axes gathered along the last; addends reduce-scattered along one axis while summed over
// the other, which a kept tensor needs a copy for and a temporary does in its own storage.
TYPED_TEST(redistribute_test, two_dimensional_rows_are_gathered_and_summed_where_they_are) {
  TypeParam::run(
      [](communicator auto& world) {
        on_counted_mesh<2>(world, [](auto& mesh, const matrix_extents& divisible) {
          using rows_over_both = split<rows_over<0, 1>, cols_over<>>;
          EXPECT_EQ(copies<col_1d<>>(mesh, from_function<rows_over_both>(mesh, divisible, value)), 0);
          EXPECT_EQ(copies<replicated<>>(mesh, from_function<block_2d<>>(mesh, divisible, value)), 1);

          using both = partial_sum<replicated<>, 0, 1>;
          const auto kept = from_function<both>(mesh, divisible, value);
          EXPECT_EQ(copies<col_1d<>>(mesh, kept), 1);
          EXPECT_EQ(copies<col_1d<>>(mesh, from_function<both>(mesh, divisible, value)), 0);
          EXPECT_EQ(copies<rows_over_both>(mesh, kept), 0);
          EXPECT_EQ(copies<block_2d<>>(mesh, kept), 1);
        });
      },
      {4, 6});
}

}  // namespace
