#pragma once
// What a kernel declares it does, so that a backend that models time can price it
// (sim/device_model.hpp) while the code that launches the kernel knows nothing of the model.
namespace shardwise {

struct work {
  double flops = 0;  // floating-point operations
  double bytes = 0;  // bytes read from and written to device memory
};

}  // namespace shardwise
