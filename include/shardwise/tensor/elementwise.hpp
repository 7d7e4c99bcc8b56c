#pragma once
// Element-wise operations on a dtensor, local to each rank (no communication).
//   transform(t, f)   a new tensor of f(element); any f, so only on final tensors: on a partial sum,
//                     f(addend) summed is not f(sum) unless f is linear, so it does not compile (the
//                     overload for partial sums is deleted: the first error names the layout).
//   scale(t, factor)  in place; linear, so allowed on partial sums too.
// Padding stays zero: f is applied to owned elements only.
#include <concepts>
#include <cstdint>
#include <type_traits>

#include "shardwise/layout/partial_sum.hpp"
#include "shardwise/tensor/dtensor.hpp"

namespace shardwise {

template <class T, class Layout, class Mesh, class F>
requires std::invocable<F&, const T&>
[[nodiscard]] auto transform(const dtensor<T, Layout, Mesh>& tensor, F&& f) {
  using U = std::remove_cvref_t<std::invoke_result_t<F&, const T&>>;
  dtensor<U, Layout, Mesh> result(tensor.mesh(), tensor.extents());
  for (int b = 0; b < tensor.block_count(); ++b) {
    auto in = tensor.local(b);
    auto out = result.local(b);
    for (std::int64_t r = 0; r < in.rows(); ++r)
      for (std::int64_t c = 0; c < in.cols(); ++c) out(r, c) = f(in(r, c));
  }
  return result;
}

template <class T, class Layout, class Mesh, class F>
requires std::invocable<F&, const T&> && is_partial_sum_v<Layout>
void transform(  // a non-linear f of addends, summed, is not f of the sum: reduce(t) first
    const dtensor<T, Layout, Mesh>&, F&&) = delete;

template <class T, class Layout, class Mesh>
void scale(dtensor<T, Layout, Mesh>& tensor, const std::type_identity_t<T>& factor) {
  for (T& element : tensor.data()) element = element * factor;
}

}  // namespace shardwise
