#pragma once
// How long a kernel takes on a simulated GPU: a roofline with a launch cost. A kernel declares the
// work it does (core/work.hpp: floating-point operations and bytes moved to and from device memory) and runs for
//   launch_latency + max(flops / peak_flops, bytes / memory_bandwidth)
// seconds of virtual time: compute-bound or memory-bound, whichever is slower, never both.
#include <algorithm>

#include "shardwise/core/work.hpp"

namespace shardwise::sim {

struct device_model {
  double peak_flops = 0;        // FLOP/s
  double memory_bandwidth = 0;  // bytes/s
  double launch_latency = 0;    // s, from the stream reaching the kernel to its first instruction

  [[nodiscard]] double duration(const work& w) const noexcept {
    return launch_latency + std::max(w.flops / peak_flops, w.bytes / memory_bandwidth);
  }
  // Reducing b received bytes into b local bytes inside a collective reads 2b and writes b, with no
  // launch of its own (it is part of the collective's kernel).
  [[nodiscard]] double reduction_time(double bytes) const noexcept { return 3 * bytes / memory_bandwidth; }
};

}  // namespace shardwise::sim
