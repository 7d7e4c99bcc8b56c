// Everything arrives through shardwise::shardwise: shardwise's headers (the umbrella header), C++20,
// threads, Eigen and range-v3. Four ranks all-reduce, and a range-v3 view and an Eigen vector check it.
#include <Eigen/Core>
#include <cstdio>
#include <range/v3/view/iota.hpp>
#include <shardwise/shardwise.hpp>
#include <vector>

static_assert(shardwise::communicator<shardwise::threads::communicator>);
static_assert(!shardwise::communicator<int>);

int main() {
  int expected = 0;
  for (const int rank : ranges::views::iota(0, 4)) expected += rank;
  int wrong = 0;
  shardwise::threads::run(4, [&](shardwise::threads::communicator& world) {
    std::vector<float> value{static_cast<float>(world.rank())};
    world.all_reduce(value, shardwise::op::sum);
    const Eigen::Map<const Eigen::VectorXf> sum(value.data(), 1);
    if (world.rank() == 0) {
      std::printf("shardwise consumer: found the package; 4 ranks summed their ranks to %g\n",
                  static_cast<double>(sum(0)));
      wrong = sum(0) == static_cast<float>(expected) ? 0 : 1;
    }
  });
  return wrong;
}
