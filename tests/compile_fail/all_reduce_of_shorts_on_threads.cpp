// Misuse: an all_reduce and a started all_reduce over short on the threads backend. The compiler must
// say that reductions are not defined on it, and say nothing more: the backend is not instantiated
// for elements a call refuses, so no error follows from inside it (every compile-fail test requires one).
#include <array>

#include "shardwise/comm/threads.hpp"

void misuse(shardwise::threads::communicator& world) {
  std::array<short, 4> values{1, 2, 3, 4};
  world.all_reduce(values);
  world.iall_reduce(values, values).wait();
}
