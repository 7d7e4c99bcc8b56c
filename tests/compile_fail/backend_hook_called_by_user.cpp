// Misuse: calling a backend's hook directly, past the checked API (argument checks, agreement of
// ranks' calls on MPI, traffic counts). A backend's hooks are private (comm/detail/backend_hooks.hpp),
// so this does not compile, and the compiler says the hook is private (EXPECT in tests/CMakeLists.txt).
#include <vector>

#include "shardwise/comm/threads.hpp"

void misuse(shardwise::threads::communicator& world) {
  std::vector<float> data(4);
  world.run(shardwise::calls::all_reduce<float>{data, data, shardwise::op::sum});
}
