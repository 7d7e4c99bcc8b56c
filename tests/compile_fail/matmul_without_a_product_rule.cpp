// Misuse: a product of two layouts no algorithm takes (a 1-D row_1d times a 2-D block_2d). The compiler
// must refuse it in words and point to the rules (EXPECT in tests/CMakeLists.txt).
#include "shardwise/comm/threads.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/ops/matmul.hpp"

using mesh_2d = shardwise::process_mesh<shardwise::threads::communicator, 2>;

void misuse(mesh_2d& mesh) {
  const shardwise::dtensor<float, shardwise::row_1d<>, mesh_2d> a(mesh, {8, 8});
  const shardwise::dtensor<float, shardwise::block_2d<>, mesh_2d> b(mesh, {8, 8});
  auto c = shardwise::matmul(a, b);
  (void)c;
}
