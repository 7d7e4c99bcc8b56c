#pragma once
// The sparse optimizer concept: how the rows a batch touched in an embedding table are updated, one row
// at a time, from the row's summed gradient and its own optimizer state (state_per_row values, zero at
// the start). optim::sparse_update (optim/sparse_update.hpp) applies one to every touched row of every
// table and to nothing else; optim::sparse_sgd and optim::rowwise_adagrad model it.
#include <concepts>
#include <cstddef>
#include <span>

namespace shardwise::optim {

template <class O>
concept sparse_optimizer =
    std::copyable<O> &&
    requires(const O& o, std::span<float> weights, std::span<const float> gradient, std::span<float> state,
             std::span<double> weights64, std::span<const double> gradient64, std::span<double> state64) {
      { O::state_per_row } -> std::convertible_to<std::size_t>;
      o.update_row(weights, gradient, state, 0.1f);
      o.update_row(weights64, gradient64, state64, 0.1);
    };

}  // namespace shardwise::optim
