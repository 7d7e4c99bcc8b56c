// The redistribute test (redistribute_test.cpp) on 3-D meshes: the paths, and the 3-D product's partial
// sums (redistribute_checks.hpp), compiled on their own.
#include <gtest/gtest.h>

#include <optional>

#include "shardwise/layout/cube_3d.hpp"
#include "shardwise/layout/partial_sum.hpp"
#include "shardwise/layout/split.hpp"
#include "tensor/redistribute_checks.hpp"

namespace {

using namespace shardwise;
using namespace shardwise::testing;

TYPED_TEST(redistribute_test, three_dimensional_paths) {
  TypeParam::run(
      [](communicator auto& world) {
        on_counted_mesh<3>(world, [](auto& mesh, const matrix_extents& divisible) {
          using cube = cube_3d<>;  // input: rows over (x, y), columns over z; weight: rows over z, columns over (y, x)
          check<cube::input, split<rows_over<0>, cols_over<2>>>(mesh, divisible, path::all_gather, 1);
          check<cube::weight, split<rows_over<2>, cols_over<1>>>(mesh, divisible, path::all_gather, 0);
          check<split<rows_over<0>, cols_over<2>>, cube::input>(mesh, divisible, path::local);
          check<cube::input, cube::output>(mesh, divisible, path::all_to_all_v);
          check<cube::input, replicated<>>(mesh, divisible, path::all_gather);  // over the whole cube at once
        });
      },
      {8, 12, 27});  // 2x2x2, 3x2x2, 3x3x3
}

// The 3-D product's local results before its reduce-scatter, for its three forms (cube_3d<>: a = y = 1,
// b = x = 0, c = z = 2), come out in the forms' result layouts by that reduce-scatter.
TYPED_TEST(redistribute_test, three_dimensional_partial_sums) {
  TypeParam::run(
      [](communicator auto& world) {
        on_counted_mesh<3>(world, [](auto& mesh, const matrix_extents& divisible) {
          using cube = cube_3d<>;
          using product = partial_sum<split<rows_over<0>, cols_over<1>>, 2>;          // C = A·B, summed along z
          using input_gradient = partial_sum<split<rows_over<0>, cols_over<2>>, 1>;   // dA, along y
          using weight_gradient = partial_sum<split<rows_over<2>, cols_over<1>>, 0>;  // dB, along x
          check_sum<product, cube::output>(mesh, divisible, reduce_scatter_along(2));
          check_sum<input_gradient, cube::input>(mesh, divisible, reduce_scatter_along(1));
          check_sum<weight_gradient, cube::weight>(mesh, divisible, reduce_scatter_along(0));
          check_sum<product, replicated<>>(mesh, divisible, all_reduce_along({2}, -1, true));
          // Addends of the whole matrix on every rank (a language model head's hidden-state gradient):
          // one reduce-scatter over the cube into the input's blocks; over the group of axes 0 and 1
          // (a communicator of its own) into blocks the z-lines replicate.
          using whole_addends = partial_sum<replicated<>, 0, 1, 2>;
          check_sum<whole_addends, cube::input>(mesh, divisible, reduce_scatter_over_the_world());
          check_sum<partial_sum<replicated<>, 0, 1>, split<rows_over<0, 1>, cols_over<>>>(mesh, divisible,
                                                                                          std::nullopt);
          using padded_cube = cube_3d<directions<>, padded>;
          using padded_product = partial_sum<split<rows_over<0>, cols_over<1>, padded>, 2>;
          check_sum<padded_product, padded_cube::output>(mesh, {13, 7}, std::nullopt);
          check_sum<padded_product, padded_cube::output>(mesh, divisible, reduce_scatter_along(2));
        });
      },
      {8, 12, 27});  // 2x2x2, 3x2x2, 3x3x3
}

}  // namespace
