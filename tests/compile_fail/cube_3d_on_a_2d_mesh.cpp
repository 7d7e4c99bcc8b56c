// Misuse: a 3-D layout on a 2-D mesh. The compiler must say that the layout cuts over a mesh axis the
// mesh does not have (EXPECT in tests/CMakeLists.txt).
#include "shardwise/comm/threads.hpp"
#include "shardwise/layout/cube_3d.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/tensor/dtensor.hpp"

using mesh_2d = shardwise::process_mesh<shardwise::threads::communicator, 2>;

void misuse(mesh_2d& mesh) {
  const shardwise::dtensor<float, shardwise::cube_3d<>::input, mesh_2d> x(mesh, {8, 8});
  (void)x;
}
