#pragma once
// softmax_rows(x): the softmax of each row, y_ij = exp(x_ij - max_k x_ik) / Σ_k exp(x_ik - max_k x_ik),
// and its backward, dx = y ∘ (dy - Σ_k dy_ik y_ik). When the layout cuts the columns, a row's max and
// sums come from the ranks that share the row (an all-reduce, op::max then op::sum, along each column
// axis; ops/row_reduction.hpp); padding columns never count, and stay zero. Output has x's layout. A
// partial-sum tensor does not compile: the softmax of the addends is not the softmax of the sum.
// Kernels (core/kernel.hpp) count an exp as 8 operations, as gelu counts tanh.
#include <Eigen/Core>
#include <concepts>

#include "shardwise/core/element.hpp"
#include "shardwise/core/error.hpp"
#include "shardwise/core/kernel.hpp"
#include "shardwise/layout/partial_sum.hpp"
#include "shardwise/layout/vector_layout.hpp"
#include "shardwise/ops/row_reduction.hpp"
#include "shardwise/tensor/binary_transform.hpp"
#include "shardwise/tensor/describe.hpp"
#include "shardwise/tensor/dtensor.hpp"

namespace shardwise {

template <value_element T, split_layout Layout, class Mesh>
[[nodiscard]] dtensor<T, Layout, Mesh> softmax_rows(const dtensor<T, Layout, Mesh>& input) try {
  Mesh& mesh = input.mesh();
  const auto x = input.local();
  using A = accumulator_t<T>;  // what the arithmetic is done in: float for bf16
  const auto maxima = row_maxima<Layout>(mesh, x);
  dtensor<T, Layout, Mesh> output(mesh, input.extents());
  auto y = output.local();
  const auto elements = static_cast<double>(x.size());
  run_kernel(mesh.world(), {9 * elements, 2 * sizeof(T) * elements}, "softmax exp", [&] {
    y = (x.template cast<A>().colwise() - maxima.template cast<A>()).array().exp().matrix().template cast<T>();
  });
  const auto sums = row_sums<Layout>(mesh, y);
  run_kernel(mesh.world(), {elements, 2 * sizeof(T) * elements}, "softmax normalise",
             [&] { y = (y.template cast<A>().array().colwise() / sums.array()).matrix().template cast<T>(); });
  return output;
} catch (...) {
  rethrow_within_call(world_rank_of(input), call_text("softmax_rows", describe(input)));
}

// dx from dy and the forward's output y.
template <value_element T, split_layout Layout, class Mesh>
[[nodiscard]] dtensor<T, Layout, Mesh> softmax_rows_backward(const dtensor<T, Layout, Mesh>& output_gradient,
                                                             const dtensor<T, Layout, Mesh>& output) try {
  Mesh& mesh = output.mesh();
  detail::check_same_shape(output_gradient, output, "softmax_rows_backward");
  const auto dy = output_gradient.local();
  const auto y = output.local();
  using A = accumulator_t<T>;
  const auto dots = row_sums<Layout>(mesh, dy.cwiseProduct(y), 2);
  dtensor<T, Layout, Mesh> input_gradient(mesh, output.extents());
  const auto elements = static_cast<double>(y.size());
  run_kernel(mesh.world(), {2 * elements, 3 * sizeof(T) * elements}, "softmax backward", [&] {
    input_gradient.local() = (y.template cast<A>().array() * (dy.template cast<A>().array().colwise() - dots.array()))
                                 .matrix()
                                 .template cast<T>();
  });
  return input_gradient;
} catch (...) {
  rethrow_within_call(world_rank_of(output),
                      call_text("softmax_rows_backward", describe(output_gradient), describe(output)));
}

template <class T, class Layout, class Mesh>
requires is_partial_sum_v<Layout> void softmax_rows(const dtensor<T, Layout, Mesh>&) =
    delete;  // softmax of addends is not softmax of the sum: reduce(t) first

}  // namespace shardwise
