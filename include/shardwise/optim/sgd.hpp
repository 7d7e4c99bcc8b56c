#pragma once
// Plain stochastic gradient descent with optional L2 weight decay: w ← w − lr · (g + λ w).
#include <array>
#include <cstddef>
#include <string_view>

#include "shardwise/optim/optimizer.hpp"

namespace shardwise::optim {

struct sgd {
  float weight_decay = 0.0f;

  static constexpr std::array<std::string_view, 0> state_names{};

  void apply(const step_info& step, const slice<0>& piece, const tensor_context& /*whole tensor*/) const {
    for (std::size_t i = 0; i < piece.size(); ++i)
      piece.weights[i] -= step.learning_rate * (piece.gradients[i] + weight_decay * piece.weights[i]);
  }
};

}  // namespace shardwise::optim
