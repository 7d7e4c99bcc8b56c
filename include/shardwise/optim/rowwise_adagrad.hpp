#pragma once
// Row-wise Adagrad for embedding tables, as FBGEMM's and DLRM's (a sparse optimizer:
// optim/sparse_optimizer.hpp): one accumulator per row instead of one per element, so the state is a
// column beside the table rather than a second table. For a touched row with summed gradient g of D
// elements:
//   G ← G + (Σ g²) / D,   w ← w − lr · g / (√G + ε)
#include <array>
#include <cmath>
#include <cstddef>
#include <span>
#include <string_view>

namespace shardwise::optim {

struct rowwise_adagrad {
  float epsilon = 1e-8f;

  // G: per row, the sum over the steps of the mean square of the row's gradient.
  static constexpr std::array<std::string_view, 1> state_names = {"sum_of_mean_squares"};

  template <class T>
  void update_row(std::span<T> weights, std::span<const T> gradient, std::span<T> state, T learning_rate) const {
    T squares = 0;
    for (const T g : gradient) squares += g * g;
    state[0] += squares / static_cast<T>(gradient.size());
    const T step = learning_rate / (std::sqrt(state[0]) + static_cast<T>(epsilon));
    for (std::size_t i = 0; i < weights.size(); ++i) weights[i] -= step * gradient[i];
  }
};

}  // namespace shardwise::optim
