#pragma once
// The sparse optimizer concept: how the rows a batch touched in an embedding table are updated, one row
// at a time, from the row's summed gradient and its own optimizer state (a value per name in
// state_names, zero at the start; checkpoints save each as a column beside the table).
// optim::sparse_update (optim/sparse_update.hpp) applies one to every touched row of every table and to
// nothing else; optim::sparse_sgd and optim::rowwise_adagrad model it.
#include <concepts>
#include <cstddef>
#include <span>
#include <string_view>
#include <tuple>
#include <type_traits>

#include "shardwise/optim/optimizer.hpp"

namespace shardwise::optim {

// A row keeps state_count<O> values (optim/optimizer.hpp), one per name of O::state_names.
template <class O>
concept sparse_optimizer =
    std::copyable<O> &&
    requires(const O& o, std::span<float> weights, std::span<const float> gradient, std::span<float> state,
             std::span<double> weights64, std::span<const double> gradient64, std::span<double> state64) {
      { std::tuple_size<std::remove_cvref_t<decltype(O::state_names)>>::value } -> std::convertible_to<std::size_t>;
      { O::state_names[0] } -> std::convertible_to<std::string_view>;
      o.update_row(weights, gradient, state, 0.1f);
      o.update_row(weights64, gradient64, state64, 0.1);
    };

}  // namespace shardwise::optim
