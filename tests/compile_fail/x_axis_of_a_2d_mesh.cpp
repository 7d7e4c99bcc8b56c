// Misuse: x() names an axis of a 3-D mesh; a 2-D mesh has row() and column(). The compiler must point
// at the dimension requirement (EXPECT in tests/CMakeLists.txt).
#include "shardwise/comm/threads.hpp"
#include "shardwise/mesh/process_mesh.hpp"

void misuse(shardwise::threads::communicator& world) {
  shardwise::process_mesh mesh(world, {2, 2});
  mesh.x().barrier();
}
