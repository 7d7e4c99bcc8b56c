#pragma once
// Adam (Kingma & Ba) with bias correction; weight decay either as an L2 term added to the gradient
// (`adam`) or decoupled from the moments (`adamw`, Loshchilov & Hutter, in adamw.hpp):
//   g' = g (+ λ w if L2);  m ← β1 m + (1 − β1) g';  v ← β2 v + (1 − β2) g'²
//   d  = (m / (1 − β1^t)) / (√(v / (1 − β2^t)) + ε)  (+ λ w if decoupled);  w ← w − lr · d
// LAMB (lamb.hpp) uses the same moments and direction, scaled by a per-tensor trust ratio.
#include <array>
#include <cmath>
#include <cstddef>
#include <string_view>

#include "shardwise/optim/optimizer.hpp"

namespace shardwise::optim {

enum class weight_decay_style { l2, decoupled };

template <weight_decay_style Style>
struct basic_adam {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float weight_decay = 0.0f;

  static constexpr std::array<std::string_view, 2> state_names{"first_moment", "second_moment"};

  // 1 − β^t for both moments, once per slice rather than per element.
  struct bias_corrections {
    float first;
    float second;
  };
  [[nodiscard]] bias_corrections corrections(long step) const {
    const auto t = static_cast<double>(step);
    return {static_cast<float>(1.0 - std::pow(static_cast<double>(beta1), t)),
            static_cast<float>(1.0 - std::pow(static_cast<double>(beta2), t))};
  }

  // One element's moments after this step and the direction d they give.
  struct element_update {
    float first_moment;
    float second_moment;
    float direction;
  };
  [[nodiscard]] element_update next(float gradient, float weight, float first_moment, float second_moment,
                                    bias_corrections c) const {
    const float g = Style == weight_decay_style::l2 ? gradient + weight_decay * weight : gradient;
    const float m = beta1 * first_moment + (1.0f - beta1) * g;
    const float v = beta2 * second_moment + (1.0f - beta2) * g * g;
    float d = (m / c.first) / (std::sqrt(v / c.second) + epsilon);
    if constexpr (Style == weight_decay_style::decoupled) d += weight_decay * weight;
    return {m, v, d};
  }

  void apply(const step_info& step, const slice<2>& piece, const tensor_context& /*whole tensor*/) const {
    const auto c = corrections(step.step);
    for (std::size_t i = 0; i < piece.size(); ++i) {
      const auto u = next(piece.gradients[i], piece.weights[i], piece.state[0][i], piece.state[1][i], c);
      piece.state[0][i] = u.first_moment;
      piece.state[1][i] = u.second_moment;
      piece.weights[i] -= step.learning_rate * u.direction;
    }
  }
};

using adam = basic_adam<weight_decay_style::l2>;

}  // namespace shardwise::optim
