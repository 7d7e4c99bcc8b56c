#pragma once
// What the sources of the collective matmul test share: the typed test suite, the operands (integers
// compared exactly, fractions within rounding) and the comparison of the 3-D forms pipelined in bands.
// The rings with the products in float (collective_matmul_test.cpp), the bands in double
// (collective_matmul_bands.cpp, and the ragged cube in collective_matmul_bands_ragged.cpp: `extern
// template` below) and the linear layers (collective_matmul_linear.cpp) compile in sources of their own,
// each of them about as costly as the others (docs/compile-time.md).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ops/matmul_checks.hpp"
#include "shardwise/layout/cube_3d.hpp"
#include "shardwise/layout/layout.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/mesh/shape.hpp"
#include "shardwise/ops/matmul.hpp"
#include "support/backends.hpp"

namespace shardwise::testing {

template <class Backend>
class collective_matmul_test : public ::testing::Test {};
TYPED_TEST_SUITE(collective_matmul_test, shardwise::testing::backends);

struct product_shape {
  std::int64_t m, k, n;
};

// Integers in [-4, 4]: every product and sum here is exact in double, so any order of summation gives
// the serial result bit for bit.
inline matrix integers(matrix_extents shape, int seed) {
  matrix m(shape.rows, shape.cols);
  for (std::int64_t i = 0; i < shape.rows; ++i)
    for (std::int64_t j = 0; j < shape.cols; ++j) m(i, j) = static_cast<double>((i * 7 + j * 3 + seed * 5) % 9 - 4);
  return m;
}

// Operands of one kind: integers compared exactly, or fractions within rounding.
struct operands {
  matrix (*values)(matrix_extents, int);
  double tolerance;
  const char* name;
};
inline const std::vector<operands> kinds = {{integers, 0.0, "integers, bit for bit"}, {serial, 1e-12, "fractions"}};

// The 3-D forms pipelined in bands; Cube is cube_3d<Directions, Padding>. On 1x2x4, 2x2x1 and 1x2x3
// grids the left operand's sources and the result's destinations cut the product's rows differently
// (on 1x2x3 neither cut divides the other; this rank's rows of a band lie in several strips, copied
// together to be sent or into place on arrival), and the gradient of the weight sends column bands of
// its transposed left operand.
template <class Cube, class Mesh>
void check_pipelined_forms(Mesh& mesh, const product_shape& s, int chunks, const operands& kind) {
  SCOPED_TRACE("grid " + shape_string(mesh.shape()) + ", M x K x N = " + std::to_string(s.m) + " x " +
               std::to_string(s.k) + " x " + std::to_string(s.n) + ", chunks " + std::to_string(chunks) + ", " +
               kind.name);
  const matrix a = kind.values({s.m, s.k}, 1);
  const matrix b = kind.values({s.k, s.n}, 2);
  const matrix dc = kind.values({s.m, s.n}, 3);
  const auto a_input = distributed<typename Cube::input>(mesh, a);
  const auto b_weight = distributed<typename Cube::weight>(mesh, b);
  const auto dc_output = distributed<typename Cube::output>(mesh, dc);
  const matmul_options options{.chunks = chunks};
  expect_equals_serial(matmul(a_input, b_weight, options), a * b, kind.tolerance);
  expect_equals_serial(matmul(dc_output, transposed(b_weight), options), dc * b.transpose(), kind.tolerance);
  expect_equals_serial(matmul(transposed(a_input), dc_output, options), a.transpose() * dc, kind.tolerance);
}

// The 3-D meshes of this executable's backend.
using mesh_3d = process_mesh<backend::communicator_type, 3>;

extern template void check_pipelined_forms<cube_3d<directions<0, 2, 1>, ragged>>(mesh_3d&, const product_shape&, int,
                                                                                 const operands&);

}  // namespace shardwise::testing
