#pragma once
// What a data-parallel update keeps resident on one rank, in bytes, measured from its own buffers.
#include <cstddef>

namespace shardwise::optim {

struct memory_footprint {
  std::size_t parameters = 0;           // elements of all tensors, without padding
  std::size_t weight_bytes = 0;         // the full weights the forward and backward passes read
  std::size_t master_weight_bytes = 0;  // float32 master weights, when the weights are stored narrower
  std::size_t gradient_bytes = 0;       // the gradient buffer (full: backward writes all of it)
  std::size_t state_bytes = 0;          // per-element optimizer state (sharded: this rank's shard)
  std::size_t tensor_state_bytes = 0;   // per-tensor optimizer state (Adafactor's factors), replicated
  std::size_t statistics_bytes = 0;     // whole-tensor sums (LAMB, LARS, Adafactor), workspace

  [[nodiscard]] std::size_t total_bytes() const noexcept {
    return weight_bytes + master_weight_bytes + gradient_bytes + state_bytes + tensor_state_bytes + statistics_bytes;
  }
  [[nodiscard]] double bytes_per_parameter() const noexcept {
    return parameters == 0 ? 0.0 : static_cast<double>(total_bytes()) / static_cast<double>(parameters);
  }
};

}  // namespace shardwise::optim
