// Everything arrives through shardwise::shardwise: shardwise's headers, C++20, Eigen and range-v3.
#include <Eigen/Core>
#include <cstdio>
#include <range/v3/view/iota.hpp>
#include <shardwise/comm/communicator.hpp>

static_assert(shardwise::reducible<float> && shardwise::reducible<shardwise::bf16>);
static_assert(!shardwise::communicator<int>);

int main() {
  int sum = 0;
  for (const int i : ranges::views::iota(1, 5)) sum += i;
  const Eigen::Vector4f v = Eigen::Vector4f::Constant(static_cast<float>(sum));
  const auto reduction = shardwise::name_of(shardwise::op::sum);
  std::printf("shardwise consumer: found the package; %.*s of four 10s = %g\n", static_cast<int>(reduction.size()),
              reduction.data(), static_cast<double>(v.sum()));
  return v.sum() == 40.0f ? 0 : 1;
}
