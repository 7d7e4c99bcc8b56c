#pragma once
// Sparse SGD for embedding tables: each touched row w ← w − lr · g, g the sum of the row's gradients in
// the batch (a sparse optimizer: optim/sparse_optimizer.hpp).
#include <array>
#include <cstddef>
#include <span>
#include <string_view>

namespace shardwise::optim {

struct sparse_sgd {
  static constexpr std::array<std::string_view, 0> state_names = {};

  template <class T>
  void update_row(std::span<T> weights, std::span<const T> gradient, std::span<T> /*state*/, T learning_rate) const {
    for (std::size_t i = 0; i < weights.size(); ++i) weights[i] -= learning_rate * gradient[i];
  }
};

}  // namespace shardwise::optim
