#pragma once
// LARS (You, Gitman, Ginsburg, "Large Batch Training of Convolutional Networks"): momentum SGD with a
// per-tensor local learning rate  η ‖w‖ / (‖g‖ + λ ‖w‖ + ε)  (1 when either norm is zero):
//   v ← μ v + lr · local_lr · (g + λ w);  w ← w − v.
// The norms are of the weights before the step and the averaged gradient: one reduction round,
// [Σ w², Σ g²] per tensor.
#include <array>
#include <cmath>
#include <cstddef>
#include <span>
#include <string_view>

#include "shardwise/optim/optimizer.hpp"

namespace shardwise::optim {

struct lars {
  float coefficient = 0.9f;  // μ
  float weight_decay = 0.0f;
  float trust_coefficient = 0.001f;  // η
  float epsilon = 0.0f;

  static constexpr std::array<std::string_view, 1> state_names{"velocity"};
  static constexpr int reduction_rounds = 1;

  [[nodiscard]] std::size_t statistics_size(int /*round*/, parameter_shape /*shape*/) const { return 2; }

  void accumulate(int /*round*/, const step_info&, const slice<1>& piece, std::span<const float> /*state*/,
                  std::span<double> sums) const {
    for (std::size_t i = 0; i < piece.size(); ++i) {
      sums[0] += static_cast<double>(piece.weights[i]) * piece.weights[i];
      sums[1] += static_cast<double>(piece.gradients[i]) * piece.gradients[i];
    }
  }

  void finish(int /*round*/, const step_info&, parameter_shape, std::span<const double>, std::span<float>) const {}

  void apply(const step_info& step, const slice<1>& piece, const tensor_context& tensor) const {
    const double weight_norm = std::sqrt(tensor.statistics[0][0]);
    const double gradient_norm = std::sqrt(tensor.statistics[0][1]);
    const float local_rate = weight_norm > 0.0 && gradient_norm > 0.0
                                 ? static_cast<float>(trust_coefficient * weight_norm /
                                                      (gradient_norm + weight_decay * weight_norm + epsilon))
                                 : 1.0f;
    const float rate = step.learning_rate * local_rate;
    const auto velocity = piece.state[0];
    for (std::size_t i = 0; i < piece.size(); ++i) {
      velocity[i] = coefficient * velocity[i] + rate * (piece.gradients[i] + weight_decay * piece.weights[i]);
      piece.weights[i] -= velocity[i];
    }
  }
};

}  // namespace shardwise::optim
