#pragma once
// multiply_vector(A, b): C = A ∘ b, every row of the M x N matrix A multiplied element-wise by the vector
// b (1 x N) — column j scaled by b_j — and its backward: dA = dC ∘ b, db = the column sums of dC ∘ A.
// b lives in vector_layout_t<Layout> (layout/vector_layout.hpp); in 3-D, the paper's diagonal storage,
// moved as in its Algorithms 7 and 8 (ops/vector_broadcast.hpp). C has A's layout.
//
//   auto c = multiply_vector(a, gamma);
//   auto [d_a, d_gamma] = multiply_vector_backward(d_c, a, gamma);
#include <concepts>
#include <functional>

#include "shardwise/core/element.hpp"
#include "shardwise/core/error.hpp"
#include "shardwise/layout/vector_layout.hpp"
#include "shardwise/ops/vector_broadcast.hpp"
#include "shardwise/tensor/binary_transform.hpp"
#include "shardwise/tensor/describe.hpp"
#include "shardwise/tensor/dtensor.hpp"

namespace shardwise {

template <value_element T, split_layout Layout, class Mesh>
[[nodiscard]] dtensor<T, Layout, Mesh> multiply_vector(const dtensor<T, Layout, Mesh>& matrix,
                                                       const dtensor<T, vector_layout_t<Layout>, Mesh>& vector) try {
  detail::check_vector_fits(matrix, vector, "multiply_vector");
  const auto& spread = broadcast_vector<Layout>(vector);
  dtensor<T, Layout, Mesh> product(matrix.mesh(), matrix.extents());
  run_kernel(matrix.mesh().world(), detail::matrix_vector_work(matrix, spread), "multiply vector",
             [&] { product.local() = (matrix.local().array().rowwise() * spread.local().row(0).array()).matrix(); });
  return product;
} catch (...) {
  rethrow_within_call(world_rank_of(matrix), call_text("multiply_vector", describe(matrix), describe(vector)));
}

template <value_element T, split_layout Layout, class Mesh>
[[nodiscard]] matrix_vector_gradients<T, Layout, Mesh> multiply_vector_backward(
    const dtensor<T, Layout, Mesh>& output_gradient, const dtensor<T, Layout, Mesh>& matrix,
    const dtensor<T, vector_layout_t<Layout>, Mesh>& vector) {
  return {multiply_vector(output_gradient, vector),
          column_sums(transform(output_gradient, matrix, std::multiplies<T>{}))};
}

}  // namespace shardwise
