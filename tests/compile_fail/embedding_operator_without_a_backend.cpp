// Misuse: the fused embedding operator given a backend that does not model fused::embedding_backend
// (here a class with none of its members). The compiler must say what a backend needs, in those words
// (EXPECT in tests/CMakeLists.txt).
#include "shardwise/comm/threads.hpp"
#include "shardwise/fused/embedding_all_to_all.hpp"

namespace {

struct not_a_backend {};

}  // namespace

int main() {
  using op = shardwise::fused::embedding_all_to_all<shardwise::threads::communicator, float, not_a_backend>;
  return static_cast<int>(sizeof(op));
}
