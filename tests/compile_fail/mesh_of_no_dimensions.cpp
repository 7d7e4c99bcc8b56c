// Misuse: a process mesh of no dimensions. A mesh has at least one axis, and the compiler must say so
// in words (EXPECT in tests/CMakeLists.txt).
#include "shardwise/comm/threads.hpp"
#include "shardwise/mesh/process_mesh.hpp"

void misuse(shardwise::threads::communicator& world) {
  shardwise::process_mesh<shardwise::threads::communicator, 0> mesh(world, {});
}
