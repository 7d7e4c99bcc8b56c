// Misuse: all_gather_matmul_both_sides of a middle operand whose columns, not rows, are cut (row_1d:
// nothing to gather in a ring for both products). The compiler must refuse it in words and point to the
// rules (EXPECT in tests/CMakeLists.txt).
#include "shardwise/comm/threads.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/ops/collective_matmul.hpp"

using mesh_1d = shardwise::process_mesh<shardwise::threads::communicator, 1>;

void misuse(mesh_1d& mesh) {
  const shardwise::dtensor<float, shardwise::row_1d<>, mesh_1d> h(mesh, {8, 8});
  const shardwise::dtensor<float, shardwise::row_1d<>, mesh_1d> dz(mesh, {8, 8});
  const shardwise::dtensor<float, shardwise::col_1d<>, mesh_1d> v(mesh, {8, 8});
  auto both = shardwise::all_gather_matmul_both_sides(shardwise::transposed(h), dz, shardwise::transposed(v));
  (void)both;
}
