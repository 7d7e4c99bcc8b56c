#pragma once
// transform(a, b, f): a new tensor of f(a_ij, b_ij) for two tensors of one layout, shape and mesh; local
// to each rank. transform_arrays(a, b, f): the same with f given the two blocks whole as Eigen arrays,
// returning the array expression Eigen vectorises. The two-argument forms of transform(t, f) and
// transform_arrays(t, f) (tensor/elementwise.hpp), with their rules: f is applied to owned elements
// only, so padding stays zero, and partial sums are refused (f of addends, summed, is not f of the sums
// unless f is linear), and their cost: one kernel, `cost.flops_per_element` operations on every owned
// element, both operands read and the result written.
#include <concepts>
#include <string>
#include <string_view>
#include <type_traits>

#include "shardwise/core/error.hpp"
#include "shardwise/core/kernel.hpp"
#include "shardwise/layout/partial_sum.hpp"
#include "shardwise/tensor/dtensor.hpp"
#include "shardwise/tensor/elementwise.hpp"

namespace shardwise {

namespace detail {

// Throws unless a and b are one shape on one mesh.
template <class A, class B>
void check_same_shape(const A& a, const B& b, std::string_view operation) {
  if (&a.mesh() != &b.mesh() || a.extents() != b.extents())
    throw argument_error(a.mesh().world().world_rank(), operation,
                         "the operands must be one shape on one mesh; they are " + extents_string(a.extents()) +
                             " and " + extents_string(b.extents()) +
                             (&a.mesh() != &b.mesh() ? ", on different meshes" : ""));
}

}  // namespace detail

template <class T, class U, class Layout, class Mesh, class F>
requires(!is_partial_sum_v<Layout>)
[[nodiscard]] auto transform_arrays(const dtensor<T, Layout, Mesh>& a, const dtensor<U, Layout, Mesh>& b, F&& f,
                                    const elementwise_cost& cost = {}) {
  detail::check_same_shape(a, b, "transform_arrays");
  using V = typename std::remove_cvref_t<decltype(f(a.local(0).array(), b.local(0).array()))>::Scalar;
  dtensor<V, Layout, Mesh> result(a.mesh(), a.extents());
  const double elements = detail::owned_elements(a);
  run_kernel(a.mesh().world(), {elements * cost.flops_per_element, elements * (sizeof(T) + sizeof(U) + sizeof(V))},
             cost.name, [&] {
               for (int k = 0; k < a.block_count(); ++k)
                 result.local(k).array() = f(a.local(k).array(), b.local(k).array());
             });
  return result;
}

template <class T, class U, class Layout, class Mesh, class F>
requires is_partial_sum_v<Layout>
auto transform_arrays(const dtensor<T, Layout, Mesh>&, const dtensor<U, Layout, Mesh>&, F&&,
                      const elementwise_cost& = {}) = delete;  // f of addends, summed, is not f of the sum

template <class T, class U, class Layout, class Mesh, class F>
requires std::invocable<F&, const T&, const U&>
[[nodiscard]] auto transform(const dtensor<T, Layout, Mesh>& a, const dtensor<U, Layout, Mesh>& b, F&& f,
                             const elementwise_cost& cost = {}) {
  detail::check_same_shape(a, b, "transform");
  using V = std::remove_cvref_t<std::invoke_result_t<F&, const T&, const U&>>;
  // Eigen calls its functor as const; the lambda lets f be any invocable, a mutable one included.
  const auto apply = [&f](const T& x, const U& y) -> V { return f(x, y); };
  return transform_arrays(a, b, [&apply](const auto& x, const auto& y) { return x.binaryExpr(y, apply); }, cost);
}

template <class T, class U, class Layout, class Mesh, class F>
requires std::invocable<F&, const T&, const U&> && is_partial_sum_v<Layout>
void transform(const dtensor<T, Layout, Mesh>&, const dtensor<U, Layout, Mesh>&, F&&, const elementwise_cost& = {}) =
    delete;  // a non-linear f of addends, summed, is not f of the sum: reduce(t) first

}  // namespace shardwise
