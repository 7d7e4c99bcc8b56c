#pragma once
// accumulate(sum, addend): sum += addend for two tensors of one layout, shape and mesh, local to each
// rank (padding, zero in both, stays zero). Linear, so allowed on partial sums over the same axes.
// Residual connections and gradients that meet at a fork (x feeding Q, K and V) add this way.
#include <cstddef>

#include "shardwise/core/kernel.hpp"
#include "shardwise/tensor/binary_transform.hpp"
#include "shardwise/tensor/dtensor.hpp"

namespace shardwise {

template <class T, class Layout, class Mesh>
void accumulate(dtensor<T, Layout, Mesh>& sum, const dtensor<T, Layout, Mesh>& addend) {
  detail::check_same_shape(sum, addend, "accumulate");
  auto s = sum.data();
  const auto a = addend.data();
  const auto elements = static_cast<double>(s.size());
  // One kernel: each stored element of both read, the sum's written.
  run_kernel(sum.mesh().world(), {elements, 3 * sizeof(T) * elements}, "accumulate", [&] {
    for (std::size_t i = 0; i < s.size(); ++i) s[i] += a[i];
  });
}

}  // namespace shardwise
