#pragma once
// add_vector(A, b): C = A + b, the vector b (1 x N) added to every row of the M x N matrix A (a bias),
// and its backward: dA = dC, db = the column sums of dC. b lives in vector_layout_t<Layout>
// (layout/vector_layout.hpp); in 3-D that is the paper's diagonal storage, and this is its Algorithms
// 7 (forward) and 8 (backward); the communication is in ops/vector_broadcast.hpp. C has A's layout.
//
//   auto c = add_vector(a, bias);                          // dtensor<T, Layout, Mesh>
//   auto y = add_vector(matmul(x, w), bias);               // a temporary takes the bias in place
//   auto [d_a, d_bias] = add_vector_backward(std::move(d_c));
//
// A partial-sum A does not compile: b added to each addend would count once per addend.
#include <concepts>
#include <utility>

#include "shardwise/core/element.hpp"
#include "shardwise/core/error.hpp"
#include "shardwise/layout/partial_sum.hpp"
#include "shardwise/layout/vector_layout.hpp"
#include "shardwise/ops/vector_broadcast.hpp"
#include "shardwise/tensor/describe.hpp"
#include "shardwise/tensor/dtensor.hpp"

namespace shardwise {

namespace detail {

// into = matrix + b in every row, b already spread as `matrix`'s rows need it; `into` may be `matrix`.
template <class T, class Layout, class Mesh, class Spread>
void add_spread_vector(dtensor<T, Layout, Mesh>& into, const dtensor<T, Layout, Mesh>& matrix, const Spread& spread) {
  run_kernel(matrix.mesh().world(), matrix_vector_work(matrix, spread), "add vector",
             [&] { into.local() = matrix.local().rowwise() + spread.local().row(0); });
}

}  // namespace detail

template <value_element T, split_layout Layout, class Mesh>
[[nodiscard]] dtensor<T, Layout, Mesh> add_vector(const dtensor<T, Layout, Mesh>& matrix,
                                                  const dtensor<T, vector_layout_t<Layout>, Mesh>& vector) try {
  detail::check_vector_fits(matrix, vector, "add_vector");
  const auto& spread = broadcast_vector<Layout>(vector);
  dtensor<T, Layout, Mesh> sum(matrix.mesh(), matrix.extents());
  detail::add_spread_vector(sum, matrix, spread);
  return sum;
} catch (...) {
  rethrow_within_call(world_rank_of(matrix), call_text("add_vector", describe(matrix), describe(vector)));
}

// A temporary A (a product's output, a bias's input) takes b in its own storage: C is A's elements, and
// no second matrix is held beside it. A tensor bound to an update's buffer shares that buffer, so it is
// left as it is and C is a new tensor.
template <value_element T, split_layout Layout, class Mesh>
[[nodiscard]] dtensor<T, Layout, Mesh> add_vector(dtensor<T, Layout, Mesh>&& matrix,
                                                  const dtensor<T, vector_layout_t<Layout>, Mesh>& vector) try {
  if (matrix.is_bound()) return add_vector(std::as_const(matrix), vector);
  detail::check_vector_fits(matrix, vector, "add_vector");
  detail::add_spread_vector(matrix, matrix, broadcast_vector<Layout>(vector));
  return std::move(matrix);
} catch (...) {
  rethrow_within_call(world_rank_of(matrix), call_text("add_vector", describe(matrix), describe(vector)));
}

// dC passes through to A unchanged (moved in, moved out: no copy for an rvalue).
template <value_element T, split_layout Layout, class Mesh>
[[nodiscard]] matrix_vector_gradients<T, Layout, Mesh> add_vector_backward(dtensor<T, Layout, Mesh> output_gradient) {
  auto vector_gradient = column_sums(output_gradient);
  return {std::move(output_gradient), std::move(vector_gradient)};
}

template <class T, class Layout, class Mesh, class Vector>
requires is_partial_sum_v<Layout> auto add_vector(  // b added to each addend counts once per addend: reduce(t) first
    const dtensor<T, Layout, Mesh>&, const Vector&) = delete;

}  // namespace shardwise
