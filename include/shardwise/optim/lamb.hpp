#pragma once
// LAMB (You et al., "Large Batch Optimization for Deep Learning"): AdamW's direction d, scaled per
// tensor by the trust ratio ‖w‖ / ‖d‖ (1 when either norm is zero):  w ← w − lr · (‖w‖ / ‖d‖) · d.
// The two norms are whole-tensor sums of squares: one reduction round, [Σ w², Σ d²] per tensor.
// accumulate() computes d from the old moments without storing them; apply() recomputes the same d
// and stores the moments, so the state is written once per step.
#include <array>
#include <cmath>
#include <cstddef>
#include <span>
#include <string_view>

#include "shardwise/optim/adam.hpp"
#include "shardwise/optim/optimizer.hpp"

namespace shardwise::optim {

struct lamb {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-6f;
  float weight_decay = 0.01f;

  static constexpr auto state_names = adam_state_names;
  static constexpr int reduction_rounds = 1;

  [[nodiscard]] std::size_t statistics_size(int /*round*/, parameter_shape /*shape*/) const { return 2; }

  void accumulate(int /*round*/, const step_info& step, const slice<2>& piece, std::span<const float> /*state*/,
                  std::span<double> sums) const {
    moments().for_each_block(step.step, piece, [&](std::size_t first, const auto& b) {
      const float* weights = piece.weights.data() + first;
      for (std::size_t i = 0; i < b.size; ++i) {
        sums[0] += static_cast<double>(weights[i]) * weights[i];
        sums[1] += static_cast<double>(b.direction[i]) * b.direction[i];
      }
    });
  }

  void finish(int /*round*/, const step_info&, parameter_shape, std::span<const double>, std::span<float>) const {}

  void apply(const step_info& step, const slice<2>& piece, const tensor_context& tensor) const {
    const double weight_norm = std::sqrt(tensor.statistics[0][0]);
    const double direction_norm = std::sqrt(tensor.statistics[0][1]);
    const float trust_ratio =
        weight_norm > 0.0 && direction_norm > 0.0 ? static_cast<float>(weight_norm / direction_norm) : 1.0f;
    moments().update(step.step, step.learning_rate * trust_ratio, piece);
  }

 private:
  [[nodiscard]] adam_moments<weight_decay_style::decoupled> moments() const {
    return {beta1, beta2, epsilon, weight_decay};
  }
};

}  // namespace shardwise::optim
