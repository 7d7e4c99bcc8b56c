// Misuse: the fused kernel's cost model built on a temporary plan, which it would keep a reference to
// after the plan is gone. The compiler must refuse, saying to name the plan.
#include "shardwise/fused/embedding_cost.hpp"
#include "shardwise/sim/presets.hpp"

double misuse() {
  const auto machine = shardwise::sim::presets::mi210_nodes(2, 1);
  const shardwise::fused::embedding_shape shape{32, 256, 512};
  shardwise::fused::fused_kernel_model kernel(
      shardwise::fused::embedding_plan(shape, 2, 32, shardwise::fused::slice_order::communication_aware), 0, machine,
      shardwise::sim::gpu_initiated_model{}, 0.0);
  return kernel.kernel().clock(0);
}
