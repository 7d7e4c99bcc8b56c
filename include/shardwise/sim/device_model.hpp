#pragma once
// How long a kernel takes on a simulated GPU: a roofline with a launch cost. A kernel declares the
// work it does (core/work.hpp: floating-point operations and bytes moved to and from device memory) and runs for
//   launch_latency + max(flops / peak_flops, bytes / memory_bandwidth)
// seconds of virtual time: compute-bound or memory-bound, whichever is slower, never both. On a device
// with matrix units for a precision (bf16, float; which devices have them: sim/presets.hpp), the
// operations of products of operands of that precision take their flops over the units' rate
// (bf16_matrix_flops, float_matrix_flops) instead, the rest their share of peak_flops.
#include <algorithm>

#include "shardwise/core/work.hpp"

namespace shardwise::sim {

struct device_model {
  double peak_flops = 0;          // FLOP/s
  double memory_bandwidth = 0;    // bytes/s
  double launch_latency = 0;      // s, from the stream reaching the kernel to its first instruction
  double bf16_matrix_flops = 0;   // FLOP/s of bf16 products on matrix units; 0: none, they run at peak_flops
  double float_matrix_flops = 0;  // FLOP/s of float products on matrix units; 0: none, they run at peak_flops

  [[nodiscard]] double compute_time(const work& w) const noexcept {
    const double on_bf16_units = bf16_matrix_flops > 0 ? w.bf16_product_flops : 0;
    const double on_float_units = float_matrix_flops > 0 ? w.float_product_flops : 0;
    double seconds = (w.flops - on_bf16_units - on_float_units) / peak_flops;
    if (on_bf16_units > 0) seconds += on_bf16_units / bf16_matrix_flops;
    if (on_float_units > 0) seconds += on_float_units / float_matrix_flops;
    return seconds;
  }
  // The time of `w` on `share` of the device (a workgroup's of a persistent kernel), with no launch.
  [[nodiscard]] double time_on_share(const work& w, double share) const noexcept {
    return std::max(compute_time(w), w.bytes / memory_bandwidth) / share;
  }
  [[nodiscard]] double duration(const work& w) const noexcept { return launch_latency + time_on_share(w, 1); }
  // Reducing b received bytes into b local bytes inside a collective reads 2b and writes b, with no
  // launch of its own (it is part of the collective's kernel).
  [[nodiscard]] double reduction_time(double bytes) const noexcept { return 3 * bytes / memory_bandwidth; }
};

}  // namespace shardwise::sim
