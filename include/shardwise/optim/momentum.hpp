#pragma once
// SGD with (heavy-ball or Nesterov) momentum, in PyTorch's convention:
//   g' = g + λ w;  v ← μ v + g';  w ← w − lr · (nesterov ? g' + μ v : v).
#include <array>
#include <cstddef>
#include <string_view>

#include "shardwise/optim/optimizer.hpp"

namespace shardwise::optim {

struct momentum {
  float coefficient = 0.9f;  // μ
  bool nesterov = false;
  float weight_decay = 0.0f;

  static constexpr std::array<std::string_view, 1> state_names{"velocity"};

  void apply(const step_info& step, const slice<1>& piece, const tensor_context& /*whole tensor*/) const {
    const auto velocity = piece.state[0];
    for (std::size_t i = 0; i < piece.size(); ++i) {
      const float g = piece.gradients[i] + weight_decay * piece.weights[i];
      velocity[i] = coefficient * velocity[i] + g;
      piece.weights[i] -= step.learning_rate * (nesterov ? g + coefficient * velocity[i] : velocity[i]);
    }
  }
};

}  // namespace shardwise::optim
