// The dtensor test (dtensor_test.cpp) on 3-D meshes: every layout's round trips and every ordered pair's
// redistributions (dtensor_checks.hpp), compiled on their own; those of the long list of layouts checked on
// every shape compile in dtensor_layouts_3d.cpp.
#define SHARDWISE_CHECK_LAYOUTS 1
#include "tensor/dtensor_checks.hpp"

#include <gtest/gtest.h>

#include "shardwise/layout/cube_3d.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/mesh/shape.hpp"

namespace {

using namespace shardwise;
using namespace shardwise::testing;

TYPED_TEST(dtensor_test, three_dimensional_round_trips) {
  TypeParam::run(
      [](communicator auto& world) {
        process_mesh mesh(world, balanced_shape<3>(world.size()));
        using paper = cube_3d<directions<>, padded>;
        using ragged_cube = cube_3d<directions<>, ragged>;
        for (const auto& shape : shapes()) {
          check_layouts(mesh, shape,
                        layouts<paper::input, paper::weight, paper::output, ragged_cube::input, ragged_cube::weight,
                                replicated<>>{});
          check_layouts(mesh, divisible(shape, world.size()), layouts<cube_3d<>::input, cube_3d<>::output>{});
          if (mesh.shape()[1] == mesh.shape()[2]) {
            check_layouts(mesh, {1, shape.cols}, layouts<paper::vector, ragged_cube::vector, paper::input>{});
          }
        }
      },
      {1, 2, 4, 6, 8, 9, 27});  // 27: the 3x3x3 cube
}

}  // namespace
