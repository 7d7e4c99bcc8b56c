// redistribute's paths (tensor/exchange.hpp, tensor/exchange_sum.hpp) on every backend. The path taken
// is seen in the collectives each of the mesh's communicators issued (a counting_communicator under the
// mesh), and every result is compared with the general all_to_all_v path and with the serial matrix:
//   no communication when the new layout adds mesh axes (rows_over<0> -> rows_over<0, 1>) or slices a
//   replicated matrix;
//   one all_gather along axis a when the new layout drops a, the last axis of a dimension's list, and
//   the pieces line up (exact; padded when the piece sizes match), for rows and for columns, on 1-D,
//   2-D and 3-D meshes, all_gather(t) included;
//   one all_to_all_v otherwise (a dropped axis that is not the last; padded or ragged pieces that do
//   not line up).
// Partial sums (partial_sum<L, axes...>) of 1-D, 2-D and 3-D layouts come out as the serial sum, in
// their split counterparts by one reduce_scatter along the pending axis the new layout cuts (an
// all_reduce along any other), and otherwise — into replicated, into L itself, pieces that do not tile —
// by one all_reduce over the pending axes and then the move; of a temporary, into its final layout, in
// the addends' own storage. Rows gathered or summed in the group's order are not copied. The tests on 2-D and 3-D
// meshes compile in sources of their own (redistribute_2d_test.cpp, redistribute_3d_test.cpp; what they
// share is in redistribute_checks.hpp); this source has the 1-D meshes'.
#include <gtest/gtest.h>

#include <Eigen/Core>

#include "shardwise/layout/partial_sum.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/tensor/distribute.hpp"
#include "tensor/redistribute_checks.hpp"

namespace {

using namespace shardwise;
using namespace shardwise::testing;

// Meshes of these sizes have every axis longer than 1, so each gather is a real one.
TYPED_TEST(redistribute_test, one_dimensional_paths) {
  TypeParam::run(
      [](communicator auto& world) {
        on_counted_mesh<1>(world, [](auto& mesh, const matrix_extents& divisible) {
          check<col_1d<>, replicated<>>(mesh, divisible, path::all_gather, 0);
          check<row_1d<>, replicated<>>(mesh, divisible, path::all_gather, 0);
          check<row_1d<padded>, replicated<>>(mesh, {5, 7}, path::all_gather, 0);  // padded pieces always tile
          check<row_1d<ragged>, replicated<>>(mesh, {5, 7}, path::all_to_all_v);   // stored unequally
          check<replicated<>, col_1d<ragged>>(mesh, {7, 5}, path::local);
          check<col_1d<>, row_1d<>>(mesh, divisible, path::all_to_all_v);

          // all_gather(t) is the gather along axis 0 too.
          const auto t = from_function<col_1d<padded>>(mesh, {7, 5}, value);
          reset_counts(mesh);
          const matrix whole = all_gather(t);
          expect_path(mesh, path::all_gather, 0);
          EXPECT_TRUE(whole == matrix::NullaryExpr(7, 5, [](Eigen::Index i, Eigen::Index j) { return value(i, j); }));
        });
      },
      {2, 3, 5, 8});
}

TYPED_TEST(redistribute_test, one_dimensional_partial_sums) {
  TypeParam::run(
      [](communicator auto& world) {
        on_counted_mesh<1>(world, [](auto& mesh, const matrix_extents& divisible) {
          using addends = partial_sum<replicated<>, 0>;  // the row-parallel product X·W before its sum
          check_sum<addends, col_1d<>>(mesh, divisible, reduce_scatter_along(0));
          check_sum<addends, row_1d<>>(mesh, divisible, reduce_scatter_along(0));
          check_sum<addends, col_1d<padded>>(mesh, {7, 5}, reduce_scatter_along(0));  // padded pieces always tile
          check_sum<addends, row_1d<padded>>(mesh, {5, 7}, reduce_scatter_along(0));
          check_sum<addends, col_1d<ragged>>(mesh, {7, 5}, all_reduce_along({0}));  // stored unequally
          check_sum<addends, replicated<>>(mesh, divisible, all_reduce_along({0}));
          check_sum<addends, col_1d<padded>>(mesh, {1, 3}, reduce_scatter_along(0));  // fewer rows than ranks
        });
      },
      {2, 3, 4, 8});
}

// Where the pieces of a gather are the destination's rows in the group's order (unpadded), the
// all_gather writes the destination itself, and where the destination blocks of a sum are the addends'
// rows, the reduce_scatter reads the addends themselves: no copy. The others copy once, into the
// group's order or out of it.
TYPED_TEST(redistribute_test, one_dimensional_rows_are_gathered_and_summed_where_they_are) {
  TypeParam::run(
      [](communicator auto& world) {
        on_counted_mesh<1>(world, [](auto& mesh, const matrix_extents& divisible) {
          const auto rows = from_function<col_1d<>>(mesh, divisible, value);
          EXPECT_EQ(copies<replicated<>>(mesh, rows), 0);
          EXPECT_EQ(copies<replicated<>>(mesh, from_function<row_1d<>>(mesh, divisible, value)), 1);
          EXPECT_EQ(copies<replicated<>>(mesh, from_function<col_1d<padded>>(mesh, {7, 5}, value)), 1);

          using addends = partial_sum<replicated<>, 0>;
          const auto kept = from_function<addends>(mesh, divisible, value);
          EXPECT_EQ(copies<col_1d<>>(mesh, kept), 0);
          EXPECT_EQ(copies<col_1d<>>(mesh, from_function<addends>(mesh, divisible, value)), 0);
          EXPECT_EQ(copies<row_1d<>>(mesh, kept), 1);
          EXPECT_EQ(copies<col_1d<padded>>(mesh, from_function<addends>(mesh, {7, 5}, value)), 1);
        });
      },
      {2, 3, 4});
}

}  // namespace
