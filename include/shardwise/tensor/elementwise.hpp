#pragma once
// Element-wise operations on a dtensor, local to each rank (no communication).
//   transform(t, f)   a new tensor of f(element); any f, so only on final tensors: on a partial sum,
//                     f(addend) summed is not f(sum) unless f is linear, so it does not compile (the
//                     overload for partial sums is deleted: the first error names the layout).
//   transform_arrays(t, f)  the same, with f given each owned block whole as an Eigen array and returning
//                     the array expression of the result, which Eigen evaluates a vector at a time, its
//                     erf, exp and tanh included, where a call of std::erf per element cannot be
//                     vectorised. transform is this with f applied per element.
//   scale(t, factor)  in place, one kernel of one operation an element; linear, so allowed on partial
//                     sums too.
// Padding stays zero: f is applied to owned elements only.
//
// Each call is one kernel (core/kernel.hpp): on simulated GPUs it takes the roofline time of its work,
// every owned element read and written once and `cost.flops_per_element` operations on it; the
// operation that calls transform declares that cost, as gelu does.
#include <concepts>
#include <type_traits>

#include "shardwise/core/kernel.hpp"
#include "shardwise/core/work.hpp"
#include "shardwise/layout/partial_sum.hpp"
#include "shardwise/tensor/dtensor.hpp"

namespace shardwise {

// What an element-wise kernel does per element, as the operation applying it declares.
struct elementwise_cost {
  double flops_per_element = 1;
  const char* name = "element-wise";
};

namespace detail {
// The elements a rank owns (its blocks without their padding).
template <class Tensor>
[[nodiscard]] double owned_elements(const Tensor& tensor) {
  double elements = 0;
  for (int b = 0; b < tensor.block_count(); ++b) elements += static_cast<double>(tensor.local(b).size());
  return elements;
}
}  // namespace detail

template <class T, class Layout, class Mesh, class F>
requires(!is_partial_sum_v<Layout>)
[[nodiscard]] auto transform_arrays(const dtensor<T, Layout, Mesh>& tensor, F&& f, const elementwise_cost& cost = {}) {
  using U = typename std::remove_cvref_t<decltype(f(tensor.local(0).array()))>::Scalar;
  dtensor<U, Layout, Mesh> result(tensor.mesh(), tensor.extents());
  const double elements = detail::owned_elements(tensor);
  run_kernel(tensor.mesh().world(), {elements * cost.flops_per_element, elements * (sizeof(T) + sizeof(U))}, cost.name,
             [&] {
               for (int b = 0; b < tensor.block_count(); ++b) result.local(b).array() = f(tensor.local(b).array());
             });
  return result;
}

template <class T, class Layout, class Mesh, class F>
requires is_partial_sum_v<Layout>
auto transform_arrays(  // a non-linear f of addends, summed, is not f of the sum: reduce(t) first
    const dtensor<T, Layout, Mesh>&, F&&, const elementwise_cost& = {}) = delete;

template <class T, class Layout, class Mesh, class F>
requires std::invocable<F&, const T&>
[[nodiscard]] auto transform(const dtensor<T, Layout, Mesh>& tensor, F&& f, const elementwise_cost& cost = {}) {
  using U = std::remove_cvref_t<std::invoke_result_t<F&, const T&>>;
  // Eigen calls its functor as const; the lambda lets f be any invocable, a mutable one included.
  const auto apply = [&f](const T& x) -> U { return f(x); };
  return transform_arrays(tensor, [&apply](const auto& block) { return block.unaryExpr(apply); }, cost);
}

template <class T, class Layout, class Mesh, class F>
requires std::invocable<F&, const T&> && is_partial_sum_v<Layout>
auto transform(  // a non-linear f of addends, summed, is not f of the sum: reduce(t) first
    const dtensor<T, Layout, Mesh>&, F&&, const elementwise_cost& = {}) = delete;

template <class T, class Layout, class Mesh>
void scale(dtensor<T, Layout, Mesh>& tensor, const std::type_identity_t<T>& factor) {
  run_kernel(
      tensor.mesh().world(),
      [&] {
        const double elements = detail::owned_elements(tensor);
        return work{elements, 2 * elements * sizeof(T)};
      },
      "scale",
      [&] {
        for (T& element : tensor.data()) element = element * factor;
      });
}

}  // namespace shardwise
