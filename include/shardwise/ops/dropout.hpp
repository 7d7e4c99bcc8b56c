#pragma once
// dropout(x, rate, seed): each element kept with probability 1 - rate and scaled by 1 / (1 - rate), or
// zeroed. Whether element (i, j) is kept is a function of (seed, i, j) alone (core/counter_random.hpp),
// so the mask is the serial computation's for every layout and rank count, replicas agree without
// talking, and nothing is stored for the backward pass: dropout_backward(dy, rate, seed) applies the
// same mask and scale to dy. Use a new seed for each step and each dropout site.
//
//   auto y = dropout(x, 0.1, seed);                 // local, no communication; padding stays zero
//   auto dx = dropout_backward(dy, 0.1, seed);
#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "shardwise/core/counter_random.hpp"
#include "shardwise/core/element.hpp"
#include "shardwise/core/error.hpp"
#include "shardwise/core/kernel.hpp"
#include "shardwise/layout/vector_layout.hpp"
#include "shardwise/tensor/describe.hpp"
#include "shardwise/tensor/dtensor.hpp"

namespace shardwise {

// The operations a kernel declares per element (core/kernel.hpp): the counter-based draw's mixing
// rounds, the comparison and the scale.
inline constexpr double dropout_operations = 16;

// Whether dropout at `rate` under `seed` keeps element (row, column).
[[nodiscard]] constexpr bool dropout_keeps(double rate, std::uint64_t seed, std::int64_t row,
                                           std::int64_t column) noexcept {
  return uniform_at(seed, row, column) >= rate;
}

template <value_element T, split_layout Layout, class Mesh>
[[nodiscard]] dtensor<T, Layout, Mesh> dropout(const dtensor<T, Layout, Mesh>& input, double rate,
                                               std::uint64_t seed) try {
  if (!(rate >= 0 && rate < 1))
    throw argument_error(input.mesh().world().world_rank(), "dropout",
                         "rate " + std::to_string(rate) + " is outside [0, 1)");
  const T scale = T(1 / (1 - rate));
  const block_info& at = input.block();
  const auto x = input.local();
  const auto elements = static_cast<double>(x.size());
  std::optional<dtensor<T, Layout, Mesh>> output;
  run_kernel(input.mesh().world(), {dropout_operations * elements, 2 * sizeof(T) * elements}, "dropout", [&] {
    output.emplace(from_function<Layout>(input.mesh(), input.extents(), [&](std::int64_t i, std::int64_t j) {
      return dropout_keeps(rate, seed, i, j) ? x(i - at.row_offset, j - at.col_offset) * scale : T(0);
    }));
  });
  return std::move(*output);
} catch (...) {
  rethrow_within_call(world_rank_of(input), call_text("dropout", describe(input)));
}

// The backward pass is the same linear map: the same mask, the same scale.
template <value_element T, split_layout Layout, class Mesh>
[[nodiscard]] dtensor<T, Layout, Mesh> dropout_backward(const dtensor<T, Layout, Mesh>& output_gradient, double rate,
                                                        std::uint64_t seed) {
  return dropout(output_gradient, rate, seed);
}

}  // namespace shardwise
