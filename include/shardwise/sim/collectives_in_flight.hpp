#pragma once
// The collectives a device took part in lately, as the cost model priced them: what ran on which
// group, from when to when. A backend keeps one per device and hands it to
// collective_cost::duration_beside, so that a collective is played beside those that still run when
// it starts. Only the most recent are kept: a collective longer ago than that has ended.
#include <cstddef>
#include <span>
#include <vector>

#include "shardwise/sim/schedule.hpp"

namespace shardwise::sim {

struct running_collective {
  int group = 0;  // collective_cost's id of its devices
  collective_shape shape;
  double start = 0;  // s
  double end = 0;    // s
};

class collectives_in_flight {
 public:
  static constexpr std::size_t kept = 32;

  void add(const running_collective& priced) {
    if (recent_.size() == kept) recent_.erase(recent_.begin());
    recent_.push_back(priced);
  }
  [[nodiscard]] std::span<const running_collective> recent() const noexcept { return recent_; }

 private:
  std::vector<running_collective> recent_;
};

}  // namespace shardwise::sim
