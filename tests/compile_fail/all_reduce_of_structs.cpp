// Misuse: an all_reduce over a struct. Reductions are defined on float, double, int32, int64 and bf16
// only, and the compiler must say so in those words (EXPECT in tests/CMakeLists.txt).
#include <array>

#include "shardwise/comm/communicator.hpp"

namespace {

// The least a backend provides (see comm/communicator.hpp), so this test depends on no real backend.
struct fake_backend : shardwise::communicator_interface<fake_backend> {
  struct request {
    void wait() {}
    bool test() { return true; }
  };
  int rank() const { return 0; }
  int size() const { return 1; }
  int world_rank() const { return 0; }
  template <class Call>
  void run(const Call&) {}
  template <class Call>
  request start(const Call&) {
    return {};
  }
};

struct point {
  float x;
  float y;
};

}  // namespace

void misuse(fake_backend& world) {
  std::array<point, 4> points{};
  world.all_reduce(points);
}
