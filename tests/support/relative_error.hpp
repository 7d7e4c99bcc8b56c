#pragma once
// How far a distributed result is from its serial reference: ‖a − b‖ / ‖b‖ for Eigen expressions of
// any element type (a zero reference does not divide by zero).
#include <algorithm>

namespace shardwise::testing {

[[nodiscard]] double relative_error(const auto& a, const auto& b) {
  return static_cast<double>((a - b).norm()) / std::max(1e-300, static_cast<double>(b.norm()));
}

}  // namespace shardwise::testing
