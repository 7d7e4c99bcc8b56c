#pragma once
// accumulate(sum, addend): sum += addend for two tensors of one layout, shape and mesh, local to each
// rank (padding, zero in both, stays zero). Linear, so allowed on partial sums over the same axes.
// Residual connections and gradients that meet at a fork (x feeding Q, K and V) add this way, and a
// bf16 weight's addends into its float gradient.
#include <concepts>
#include <cstddef>

#include "shardwise/core/element.hpp"

#include "shardwise/core/kernel.hpp"
#include "shardwise/tensor/binary_transform.hpp"
#include "shardwise/tensor/dtensor.hpp"

namespace shardwise {

template <class S, class T, class Layout, class Mesh>
requires std::same_as<S, T> || std::same_as<S, accumulator_t<T>>
void accumulate(dtensor<S, Layout, Mesh>& sum, const dtensor<T, Layout, Mesh>& addend) {
  detail::check_same_shape(sum, addend, "accumulate");
  auto s = sum.data();
  const auto a = addend.data();
  const auto elements = static_cast<double>(s.size());
  // One kernel: each stored element of both read, the sum's written.
  run_kernel(sum.mesh().world(), {elements, (2 * sizeof(S) + sizeof(T)) * elements}, "accumulate", [&] {
    for (std::size_t i = 0; i < s.size(); ++i) s[i] += a[i];
  });
}

}  // namespace shardwise
