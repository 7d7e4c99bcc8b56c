// The collective matmul test's 3-D products pipelined in bands (collective_matmul_test.cpp describes the
// test): the test, and its cubes but the ragged one, compiled in a source of their own
// (collective_matmul_checks.hpp).
#include <gtest/gtest.h>

#include <vector>

#include "ops/collective_matmul_checks.hpp"
#include "shardwise/layout/cube_3d.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/mesh/shape.hpp"
#include "support/backends.hpp"

namespace {

using namespace shardwise;
using namespace shardwise::testing;

TYPED_TEST(collective_matmul_test, pipelined_3d_products_equal_serial_eigen) {
  TypeParam::run(
      [](communicator auto& world) {
        const int p = world.size();
        const std::vector<coordinates<3>> grids = p == 8   ? std::vector<coordinates<3>>{{2, 2, 2}, {1, 2, 4}}
                                                  : p == 6 ? std::vector<coordinates<3>>{{1, 2, 3}}
                                                           : std::vector{balanced_shape<3>(p)};
        for (const auto& grid : grids) {
          process_mesh mesh(world, grid);
          for (const operands& kind : kinds)
            for (const int chunks : {2, 3, 7, 1000}) {
              check_pipelined_forms<cube_3d<>>(mesh, {4 * p, 2 * p, 3 * p}, chunks, kind);
              check_pipelined_forms<cube_3d<directions<2, 0, 1>>>(mesh, {6 * p, p, 2 * p}, chunks, kind);
              for (const product_shape& s : std::vector<product_shape>{{1, 1, 1}, {13, 7, 11}, {5, 9, 3}}) {
                check_pipelined_forms<cube_3d<directions<>, padded>>(mesh, s, chunks, kind);
                check_pipelined_forms<cube_3d<directions<0, 2, 1>, ragged>>(mesh, s, chunks, kind);
              }
            }
        }
      },
      {1, 4, 6, 8});
}

}  // namespace
