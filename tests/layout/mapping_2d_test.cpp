// The layout mapping test (mapping_test.cpp) on 2-D meshes: every layout's mapping keeps the layout
// contract (mapping_checks.hpp), compiled on its own.
#include <gtest/gtest.h>

#include "layout/mapping_checks.hpp"
#include "shardwise/layout/block_cyclic_2d.hpp"
#include "shardwise/layout/layout.hpp"
#include "shardwise/layout/padding.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/mesh/shape.hpp"

namespace {

using namespace shardwise;
using namespace shardwise::testing;

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

}  // namespace
