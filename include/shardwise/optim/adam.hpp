#pragma once
// Adam (Kingma & Ba) with bias correction; weight decay either as an L2 term added to the gradient
// (`adam`) or decoupled from the moments (`adamw`, Loshchilov & Hutter, in adamw.hpp):
//   g' = g (+ λ w if L2);  m ← β1 m + (1 − β1) g';  v ← β2 v + (1 − β2) g'²
//   d  = (m / (1 − β1^t)) / (√v / √(1 − β2^t) + ε)  (+ λ w if decoupled);  w ← w − lr · d
// LAMB (lamb.hpp) uses the same moments and direction, scaled by a per-tensor trust ratio; both go
// through adam_moments below.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <span>
#include <string_view>

#include "shardwise/optim/optimizer.hpp"
#include "shardwise/optim/square_roots.hpp"

namespace shardwise::optim {

enum class weight_decay_style { l2, decoupled };

// The state of every optimizer built on Adam's moments.
inline constexpr std::array<std::string_view, 2> adam_state_names{"first_moment", "second_moment"};

// Adam's new moments and direction d for the elements of a slice, computed a block at a time into
// arrays that stay in L1 cache, in passes simple enough for the compiler to vectorise (the square
// roots in their own pass, square_roots.hpp). update() stores them (Adam, and LAMB's apply); LAMB's
// accumulate reads only the directions.
template <weight_decay_style Style>
struct adam_moments {
  float beta1;
  float beta2;
  float epsilon;
  float weight_decay;

  static constexpr std::size_t block_elements = 1024;

  struct block {
    std::size_t size = 0;
    std::array<float, block_elements> first_moment;
    std::array<float, block_elements> second_moment;
    std::array<float, block_elements> direction;
  };

  // Calls visit(first, block) for consecutive blocks: elements [first, first + block.size) of the slice.
  template <class Visit>
  void for_each_block(long step, const slice<2>& piece, Visit&& visit) const {
    // The bias corrections as factors, once per slice: per element, divisions (and square roots) are
    // what the update's arithmetic spends its time on, so there is one of each (as in PyTorch's Adam).
    const auto t = static_cast<double>(step);
    const double first_correction = 1.0 - std::pow(static_cast<double>(beta1), t);
    const double second_correction = 1.0 - std::pow(static_cast<double>(beta2), t);
    const auto inverse_first_correction = static_cast<float>(1.0 / first_correction);
    const auto inverse_root_second_correction = static_cast<float>(1.0 / std::sqrt(second_correction));
    block b;
    for (std::size_t first = 0; first < piece.size(); first += block_elements) {
      b.size = std::min(block_elements, piece.size() - first);
      const float* gradients = piece.gradients.data() + first;
      const float* weights = piece.weights.data() + first;
      const float* first_moments = piece.state[0].data() + first;
      const float* second_moments = piece.state[1].data() + first;
      for (std::size_t i = 0; i < b.size; ++i) {
        const float g = Style == weight_decay_style::l2 ? gradients[i] + weight_decay * weights[i] : gradients[i];
        b.first_moment[i] = beta1 * first_moments[i] + (1.0f - beta1) * g;
        b.second_moment[i] = beta2 * second_moments[i] + (1.0f - beta2) * g * g;
      }
      square_roots(std::span<const float>(b.second_moment).first(b.size), b.direction);
      for (std::size_t i = 0; i < b.size; ++i) {
        b.direction[i] = (b.first_moment[i] * inverse_first_correction) /
                         (b.direction[i] * inverse_root_second_correction + epsilon);
        if constexpr (Style == weight_decay_style::decoupled) b.direction[i] += weight_decay * weights[i];
      }
      visit(first, static_cast<const block&>(b));
    }
  }

  // Stores the new moments and w ← w − rate · d: Adam's update with rate = lr, LAMB's with lr times
  // the trust ratio.
  void update(long step, float rate, const slice<2>& piece) const {
    for_each_block(step, piece, [&](std::size_t first, const block& b) {
      float* weights = piece.weights.data() + first;
      float* first_moments = piece.state[0].data() + first;
      float* second_moments = piece.state[1].data() + first;
      for (std::size_t i = 0; i < b.size; ++i) {
        first_moments[i] = b.first_moment[i];
        second_moments[i] = b.second_moment[i];
        weights[i] -= rate * b.direction[i];
      }
    });
  }
};

template <weight_decay_style Style>
struct basic_adam {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float weight_decay = 0.0f;

  static constexpr auto state_names = adam_state_names;

  void apply(const step_info& step, const slice<2>& piece, const tensor_context& /*whole tensor*/) const {
    adam_moments<Style>{beta1, beta2, epsilon, weight_decay}.update(step.step, step.learning_rate, piece);
  }
};

using adam = basic_adam<weight_decay_style::l2>;

}  // namespace shardwise::optim
