#pragma once
// Layer normalisation over each row of an M x N matrix, with learnable gamma and beta (1 x N vectors in
// vector_layout_t<Layout>, as for add_vector and multiply_vector):
//
//   x̂ = (x - mean) / √(var + ε)     mean and (biased) var over the row's N true columns
//   y  = x̂ ∘ gamma + beta
//
// and its backward, with g = dy ∘ gamma:
//   dx = (g - mean(g) - x̂ ∘ mean(g ∘ x̂)) / √(var + ε),   dgamma = Σ_rows dy ∘ x̂,   dbeta = Σ_rows dy.
// A row's statistics come from the ranks that share it (ops/row_reduction.hpp): two all-reduces along
// the column axes forward (mean, then the centred variance: no cancellation), one backward. Padding
// never counts and stays zero. The scale and shift are multiply_vector and add_vector, so in 3-D gamma
// and beta move as the paper's Algorithms 7 and 8 say.
//
//   auto [y, saved] = layer_norm(x, gamma, beta);
//   auto [dx, dgamma, dbeta] = layer_norm_backward(dy, saved, gamma);
#include <Eigen/Core>
#include <concepts>
#include <string>
#include <utility>

#include "shardwise/comm/reduction.hpp"
#include "shardwise/core/element.hpp"
#include "shardwise/core/error.hpp"
#include "shardwise/core/kernel.hpp"
#include "shardwise/layout/partial_sum.hpp"
#include "shardwise/layout/vector_layout.hpp"
#include "shardwise/ops/add_vector.hpp"
#include "shardwise/ops/multiply_vector.hpp"
#include "shardwise/ops/row_reduction.hpp"
#include "shardwise/ops/vector_broadcast.hpp"
#include "shardwise/tensor/describe.hpp"
#include "shardwise/tensor/dtensor.hpp"

namespace shardwise {

// What the backward pass needs from the forward one.
template <class T, class Layout, class Mesh>
struct layer_norm_saved {
  dtensor<T, Layout, Mesh> normalized;                                   // x̂
  Eigen::Matrix<accumulator_t<T>, Eigen::Dynamic, 1> inverse_deviation;  // 1 / √(var + ε), one per local row
};

template <class T, class Layout, class Mesh>
struct layer_norm_result {
  dtensor<T, Layout, Mesh> output;
  layer_norm_saved<T, Layout, Mesh> saved;
};

template <class T, class Layout, class Mesh>
struct layer_norm_gradients {
  dtensor<T, Layout, Mesh> input;
  dtensor<T, vector_layout_t<Layout>, Mesh> gamma;
  dtensor<T, vector_layout_t<Layout>, Mesh> beta;
};

template <value_element T, split_layout Layout, class Mesh>
[[nodiscard]] layer_norm_result<T, Layout, Mesh> layer_norm(const dtensor<T, Layout, Mesh>& input,
                                                            const dtensor<T, vector_layout_t<Layout>, Mesh>& gamma,
                                                            const dtensor<T, vector_layout_t<Layout>, Mesh>& beta,
                                                            T epsilon = T(1e-5)) try {
  Mesh& mesh = input.mesh();
  if (!(epsilon > 0))
    throw argument_error(mesh.world().world_rank(), "layer_norm",
                         "epsilon " + std::to_string(epsilon) + " must be positive");
  using A = accumulator_t<T>;  // the statistics and the arithmetic: float for bf16 elements
  const A columns = A(input.cols());
  const auto x = input.local();
  const Eigen::Matrix<A, Eigen::Dynamic, 1> means = row_sums<Layout>(mesh, x) / columns;
  dtensor<T, Layout, Mesh> normalized(mesh, input.extents());
  auto centred = normalized.local();
  const work pass{static_cast<double>(x.size()), 2 * sizeof(T) * static_cast<double>(x.size())};
  run_kernel(mesh.world(), pass, "layer norm centre",
             [&] { centred = (x.template cast<A>().colwise() - means).template cast<T>(); });
  const Eigen::Matrix<A, Eigen::Dynamic, 1> variances = row_sums<Layout>(mesh, centred.array().square()) / columns;
  Eigen::Matrix<A, Eigen::Dynamic, 1> inverse_deviation = (variances.array() + A(epsilon)).rsqrt().matrix();
  run_kernel(mesh.world(), pass, "layer norm scale", [&] {
    centred = (centred.template cast<A>().array().colwise() * inverse_deviation.array()).matrix().template cast<T>();
  });
  auto output = add_vector(multiply_vector(normalized, gamma), beta);
  return {std::move(output), {std::move(normalized), std::move(inverse_deviation)}};
} catch (...) {
  rethrow_within_call(world_rank_of(input), call_text("layer_norm", describe(input), describe(gamma), describe(beta)));
}

template <value_element T, split_layout Layout, class Mesh>
[[nodiscard]] layer_norm_gradients<T, Layout, Mesh> layer_norm_backward(
    const dtensor<T, Layout, Mesh>& output_gradient, const layer_norm_saved<T, Layout, Mesh>& saved,
    const dtensor<T, vector_layout_t<Layout>, Mesh>& gamma) try {
  Mesh& mesh = output_gradient.mesh();
  auto [normalized_gradient, gamma_gradient] = multiply_vector_backward(output_gradient, saved.normalized, gamma);
  const auto g = normalized_gradient.local();
  const auto x_hat = saved.normalized.local();
  // Both row means in one all-reduce: column 0 sums g, column 1 sums g ∘ x̂.
  using A = accumulator_t<T>;
  row_values<A> means(g.rows(), 2);
  const auto elements = static_cast<double>(g.size());
  run_kernel(mesh.world(), {3 * elements, 2 * sizeof(T) * elements}, "layer norm backward row means", [&] {
    means.col(0) = g.template cast<A>().rowwise().sum();
    means.col(1) = g.cwiseProduct(x_hat).template cast<A>().rowwise().sum();
  });
  combine_across_row<Layout>(mesh, means, op::sum);
  means /= A(output_gradient.cols());
  dtensor<T, Layout, Mesh> input_gradient(mesh, output_gradient.extents());
  run_kernel(mesh.world(), {4 * elements, 3 * sizeof(T) * elements}, "layer norm backward", [&] {
    input_gradient.local() = (((g.template cast<A>().array().colwise() - means.col(0).array()) -
                               x_hat.template cast<A>().array().colwise() * means.col(1).array())
                                  .colwise() *
                              saved.inverse_deviation.array())
                                 .matrix()
                                 .template cast<T>();
  });
  return {std::move(input_gradient), std::move(gamma_gradient), column_sums(output_gradient)};
} catch (...) {
  rethrow_within_call(world_rank_of(output_gradient),
                      call_text("layer_norm_backward", describe(output_gradient), describe(gamma)));
}

template <class T, class Layout, class Mesh, class... Parameters>
requires is_partial_sum_v<Layout>
auto layer_norm(const dtensor<T, Layout, Mesh>&,
                const Parameters&...) = delete;  // the statistics of addends are not those of the sum: reduce(t) first

}  // namespace shardwise
