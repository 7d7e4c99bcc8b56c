// Misuse: a 4-D process mesh. Meshes have 1, 2 or 3 dimensions, and the compiler must say so in words
// (EXPECT in tests/CMakeLists.txt).
#include "shardwise/comm/threads.hpp"
#include "shardwise/mesh/process_mesh.hpp"

void misuse(shardwise::threads::communicator& world) {
  shardwise::process_mesh<shardwise::threads::communicator, 4> mesh(world, {1, 1, 1, 1});
}
