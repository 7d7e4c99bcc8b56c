// Misuse: a type that declares its state but no elementwise update, used as an optimizer. The
// compiler must say what an optimizer declares (EXPECT in tests/CMakeLists.txt).
#include <array>
#include <string_view>

#include "shardwise/comm/threads.hpp"
#include "shardwise/optim/sharded.hpp"

namespace {

struct no_update {
  static constexpr std::array<std::string_view, 1> state_names{"velocity"};
};

}  // namespace

void misuse(shardwise::threads::communicator& world) {
  shardwise::optim::sharded_update<no_update> update(world, {{2, 3}});
}
