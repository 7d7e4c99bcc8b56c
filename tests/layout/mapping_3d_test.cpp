// The layout mapping test (mapping_test.cpp) on 3-D meshes: every layout's mapping keeps the layout
// contract (mapping_checks.hpp), compiled on its own.
#include <gtest/gtest.h>

#include "layout/mapping_checks.hpp"
#include "shardwise/layout/cube_3d.hpp"
#include "shardwise/layout/layout.hpp"
#include "shardwise/layout/padding.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/mesh/shape.hpp"

namespace {

using namespace shardwise;
using namespace shardwise::testing;

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

}  // namespace
