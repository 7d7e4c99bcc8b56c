// The dtensor test (dtensor_test.cpp) on 1-D meshes: every layout's round trips and every ordered pair's
// redistributions (dtensor_checks.hpp), compiled on their own.
#define SHARDWISE_CHECK_LAYOUTS 1
#include "tensor/dtensor_checks.hpp"

#include <gtest/gtest.h>

#include "shardwise/layout/split.hpp"
#include "shardwise/mesh/process_mesh.hpp"

namespace {

using namespace shardwise;
using namespace shardwise::testing;

TYPED_TEST(dtensor_test, one_dimensional_round_trips) {
  TypeParam::run(
      [](communicator auto& world) {
        process_mesh mesh(world, {world.size()});
        for (const auto& shape : shapes()) {
          check_layouts(mesh, shape, layouts<replicated<ragged>, row_1d<ragged>, col_1d<padded>, row_1d<padded>>{});
          check_layouts(mesh, divisible(shape, world.size()), layouts<row_1d<>, col_1d<>>{});
        }
      },
      rank_counts);
}

}  // namespace
