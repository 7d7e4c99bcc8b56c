#pragma once
// What the sources of the 3-D product test share: the typed test suite, its rank counts and grids, and
// the comparison of the three forms with Eigen for every padding rule of one choice of directions. Each
// choice's comparisons compile in a source of their own (`extern template` below), so that no object
// compiles more than three of the nine cubes they cover, besides the cubes of matmul_3d_test.cpp's other
// tests.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "ops/matmul_checks.hpp"
#include "shardwise/layout/cube_3d.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/mesh/shape.hpp"
#include "shardwise/ops/matmul.hpp"
#include "support/backends.hpp"

namespace shardwise::testing {

template <class Backend>
class matmul_3d_test : public ::testing::Test {};
TYPED_TEST_SUITE(matmul_3d_test, shardwise::testing::backends);

// Grids of `ranks` ranks: cubes and rectangular ones, with each axis of extent 1 somewhere.
inline std::vector<coordinates<3>> grids(int ranks) {
  switch (ranks) {
    case 4: return grid_shapes<3>(4);  // 1x1x4 ... 4x1x1, 1x2x2, 2x1x2, 2x2x1
    case 8: return {{2, 2, 2}, {1, 2, 4}, {4, 2, 1}};
    case 12: return {{2, 2, 3}, {3, 2, 2}};
    case 16: return {{4, 2, 2}, {2, 2, 4}};
    default: return {balanced_shape<3>(ranks)};
  }
}

struct product_shape {
  std::int64_t m, k, n;
};

// The three forms for cube_3d<Directions, Padding>, compared with Eigen.
template <class Cube, class Mesh>
void check_forms(Mesh& mesh, const product_shape& s) {
  SCOPED_TRACE("grid " + shape_string(mesh.shape()) + ", M x K x N = " + std::to_string(s.m) + " x " +
               std::to_string(s.k) + " x " + std::to_string(s.n));
  const matrix a = serial({s.m, s.k}, 1);
  const matrix b = serial({s.k, s.n}, 2);
  const matrix dc = serial({s.m, s.n}, 3);
  const auto da_input = distributed<typename Cube::input>(mesh, a);
  const auto b_weight = distributed<typename Cube::weight>(mesh, b);
  const auto dc_output = distributed<typename Cube::output>(mesh, dc);

  const auto c = matmul(da_input, b_weight);
  static_assert(std::is_same_v<typename decltype(c)::layout_type, typename Cube::output>);
  expect_equals_serial(c, a * b);

  const auto da = matmul(dc_output, transposed(b_weight));
  static_assert(std::is_same_v<typename decltype(da)::layout_type, typename Cube::input>);
  expect_equals_serial(da, dc * b.transpose());

  const auto db = matmul(transposed(da_input), dc_output);
  static_assert(std::is_same_v<typename decltype(db)::layout_type, typename Cube::weight>);
  expect_equals_serial(db, a.transpose() * dc);
}

// The 3-D meshes of this executable's backend.
using mesh_3d = process_mesh<backend::communicator_type, 3>;

template <class Directions>
void check_every_padding(mesh_3d& mesh) {
  const int p = grid_size(mesh.shape());
  // Exact: every dimension a multiple of the grid's size divides every cut.
  check_forms<cube_3d<Directions>>(mesh, {2 * p, p, 3 * p});
  for (const product_shape& s : std::vector<product_shape>{{1, 1, 1}, {13, 7, 11}, {5, 9, 3}, {2 * p, p, 3 * p}}) {
    check_forms<cube_3d<Directions, padded>>(mesh, s);
    check_forms<cube_3d<Directions, ragged>>(mesh, s);
  }
}

extern template void check_every_padding<directions<>>(mesh_3d&);
extern template void check_every_padding<directions<2, 0, 1>>(mesh_3d&);
extern template void check_every_padding<directions<0, 2, 1>>(mesh_3d&);

}  // namespace shardwise::testing
