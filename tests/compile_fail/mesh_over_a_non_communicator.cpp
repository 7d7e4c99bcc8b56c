// Misuse: a process mesh over something that is not a communicator (here an int). The compiler must
// name the concept it expected (EXPECT in tests/CMakeLists.txt).
#include "shardwise/mesh/process_mesh.hpp"

void misuse(int& world) { shardwise::process_mesh mesh(world, {1, 1}); }
