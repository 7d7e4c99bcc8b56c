// Misuse: all_gather_matmul of two operands neither of which has its rows cut over axis 0 with its
// columns whole (row_1d times row_1d: nothing to gather in a ring). The compiler must refuse it in words
// and point to the rules (EXPECT in tests/CMakeLists.txt).
#include "shardwise/comm/threads.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/ops/collective_matmul.hpp"

using mesh_1d = shardwise::process_mesh<shardwise::threads::communicator, 1>;

void misuse(mesh_1d& mesh) {
  const shardwise::dtensor<float, shardwise::row_1d<>, mesh_1d> x(mesh, {8, 8});
  const shardwise::dtensor<float, shardwise::row_1d<>, mesh_1d> w(mesh, {8, 8});
  auto y = shardwise::all_gather_matmul(x, w);
  (void)y;
}
