#pragma once
// nn::linear<T, InputLayout, WeightLayout, Mesh>: y = x·W + b, forward and backward, distributed as
// the layouts say. The product rule for the two layouts (ops/matmul.hpp) gives the output layout, so
//   linear<T, cube_3d<>::input, cube_3d<>::weight, Mesh>::output_layout == cube_3d<>::output
// and a pair of layouts with no product rule does not compile. The bias lives in
// vector_layout_t<output_layout> (in 3-D the paper's diagonal storage).
//
// Backward, from dy:  dx = dy·Wᵀ,  dW = xᵀ·dy,  db = column sums of dy  (the input is kept from forward).
// Gradients are overwritten by each backward, not accumulated.
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "shardwise/core/error.hpp"
#include "shardwise/layout/vector_layout.hpp"
#include "shardwise/nn/parameter.hpp"
#include "shardwise/ops/add_vector.hpp"
#include "shardwise/ops/matmul.hpp"
#include "shardwise/tensor/dtensor.hpp"
#include "shardwise/tensor/reduce.hpp"

namespace shardwise::nn {

namespace detail {
// A product that comes back as partial sums (the 1-D row-parallel product) is summed here.
template <class Tensor>
auto final_sum(Tensor&& t) {
  if constexpr (std::remove_cvref_t<Tensor>::is_partial_sum) {
    return reduce(t);
  } else {
    return std::forward<Tensor>(t);
  }
}
}  // namespace detail

template <class T, class InputLayout, class WeightLayout, class Mesh>
class linear {
 public:
  using input_type = dtensor<T, InputLayout, Mesh>;
  using weight_type = parameter<T, WeightLayout, Mesh>;
  using output_type = std::remove_cvref_t<decltype(detail::final_sum(
      matmul(std::declval<const input_type&>(), std::declval<const dtensor<T, WeightLayout, Mesh>&>())))>;
  using output_layout = typename output_type::layout_type;
  using bias_type = parameter<T, vector_layout_t<output_layout>, Mesh>;

  // inputs x outputs weights uniform in ±1/√inputs (as PyTorch's default), bias zero; `seed` names the
  // layer, so that distributed and serial models start equal.
  linear(Mesh& mesh, std::int64_t inputs, std::int64_t outputs, std::uint64_t seed)
      : weight_(mesh, {inputs, outputs}, seed, static_cast<T>(1 / std::sqrt(static_cast<double>(inputs)))),
        bias_(mesh, {1, outputs}, T(0)) {}

  [[nodiscard]] output_type forward(const input_type& x) {
    input_.emplace(x);
    return add_vector(detail::final_sum(matmul(x, weight_.value)), bias_.value);
  }

  [[nodiscard]] input_type backward(const output_type& output_gradient) {
    if (!input_)
      throw argument_error(weight_.value.mesh().world().world_rank(), "nn::linear::backward",
                           "backward before forward: the layer keeps its input from forward");
    auto [product_gradient, bias_gradient] = add_vector_backward(output_type(output_gradient));
    bias_.gradient = std::move(bias_gradient);
    weight_.gradient = detail::final_sum(matmul(transposed(*input_), product_gradient));
    return detail::final_sum(matmul(product_gradient, transposed(weight_.value)));
  }

  [[nodiscard]] weight_type& weight() noexcept { return weight_; }
  [[nodiscard]] bias_type& bias() noexcept { return bias_; }

  template <class F>
  void for_each_parameter(F&& f) {
    f(weight_);
    f(bias_);
  }

 private:
  weight_type weight_;
  bias_type bias_;
  std::optional<input_type> input_;
};

}  // namespace shardwise::nn
