#pragma once
// gelu(x): the Gaussian error linear unit, exact or in the tanh approximation used by GPT-2 and
// Megatron (PyTorch's approximate='none' and 'tanh'):
//   exact:  gelu(x) = x/2 · (1 + erf(x/√2)),         gelu'(x) = (1 + erf(x/√2))/2 + x · φ(x)
//   tanh:   gelu(x) = x/2 · (1 + tanh(u)),   u = √(2/π) · (x + 0.044715 x³),
//           gelu'(x) = (1 + tanh(u))/2 + x/2 · (1 - tanh²(u)) · √(2/π) · (1 + 3 · 0.044715 x²)
// with φ the standard normal density; backward is dx = dy · gelu'(x).
// Element-wise and local to each rank (no communication), on any layout; padding stays zero. A
// partial-sum tensor does not compile: gelu of the addends, summed, is not gelu of the sum.
#include <cmath>
#include <concepts>
#include <numbers>

#include "shardwise/core/error.hpp"
#include "shardwise/layout/partial_sum.hpp"
#include "shardwise/tensor/binary_transform.hpp"
#include "shardwise/tensor/describe.hpp"
#include "shardwise/tensor/dtensor.hpp"
#include "shardwise/tensor/elementwise.hpp"

namespace shardwise {

namespace detail {

template <std::floating_point T>
struct gelu_exact {
  static constexpr T inverse_sqrt2 = T(std::numbers::sqrt2 / 2);
  static constexpr T inverse_sqrt_2pi = T(std::numbers::inv_sqrtpi * std::numbers::sqrt2 / 2);  // 1/√(2π)

  static T value(T x) { return T(0.5) * x * (T(1) + std::erf(x * inverse_sqrt2)); }
  static T derivative(T x) {
    return T(0.5) * (T(1) + std::erf(x * inverse_sqrt2)) + x * inverse_sqrt_2pi * std::exp(T(-0.5) * x * x);
  }
};

template <std::floating_point T>
struct gelu_tanh {
  static constexpr T cubic = T(0.044715);
  static constexpr T slope = T(std::numbers::sqrt2 * std::numbers::inv_sqrtpi);  // √(2/π)

  static T value(T x) { return T(0.5) * x * (T(1) + std::tanh(slope * (x + cubic * x * x * x))); }
  static T derivative(T x) {
    const T t = std::tanh(slope * (x + cubic * x * x * x));
    return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * slope * (T(1) + T(3) * cubic * x * x);
  }
};

// The kernels' declared work (tensor/elementwise.hpp): the arithmetic counted, a tanh, erf or exp as 8
// operations. At 4 + 4 bytes an element GeLU is memory-bound on every device modelled, whatever the count.
inline constexpr elementwise_cost gelu_cost{16, "GeLU"};
inline constexpr elementwise_cost gelu_backward_cost{24, "GeLU backward"};

}  // namespace detail

enum class gelu_approximation { tanh, none };

template <std::floating_point T, class Layout, class Mesh>
requires(!is_partial_sum_v<Layout>)
[[nodiscard]] dtensor<T, Layout, Mesh> gelu(const dtensor<T, Layout, Mesh>& input,
                                            gelu_approximation approximation = gelu_approximation::tanh) try {
  return approximation == gelu_approximation::tanh ? transform(input, detail::gelu_tanh<T>::value, detail::gelu_cost)
                                                   : transform(input, detail::gelu_exact<T>::value, detail::gelu_cost);
} catch (...) {
  rethrow_within_call(world_rank_of(input), call_text("gelu", describe(input)));
}

// dx from dy and the forward's input x.
template <std::floating_point T, class Layout, class Mesh>
requires(!is_partial_sum_v<Layout>)
[[nodiscard]] dtensor<T, Layout, Mesh> gelu_backward(const dtensor<T, Layout, Mesh>& output_gradient,
                                                     const dtensor<T, Layout, Mesh>& input,
                                                     gelu_approximation approximation = gelu_approximation::tanh) try {
  if (approximation == gelu_approximation::tanh)
    return transform(
        output_gradient, input, [](T dy, T x) { return dy * detail::gelu_tanh<T>::derivative(x); },
        detail::gelu_backward_cost);
  return transform(
      output_gradient, input, [](T dy, T x) { return dy * detail::gelu_exact<T>::derivative(x); },
      detail::gelu_backward_cost);
} catch (...) {
  rethrow_within_call(world_rank_of(input), call_text("gelu_backward", describe(output_gradient), describe(input)));
}

template <class T, class Layout, class Mesh>
requires is_partial_sum_v<Layout> void gelu(  // gelu of addends, summed, is not gelu of the sum: reduce(t) first
    const dtensor<T, Layout, Mesh>&, gelu_approximation = {}) = delete;
template <class T, class Layout, class Mesh>
requires is_partial_sum_v<Layout> void gelu_backward(  // gelu' of an addend is not gelu' of the sum: reduce(t) first
    const dtensor<T, Layout, Mesh>&, const dtensor<T, Layout, Mesh>&, gelu_approximation = {}) = delete;

}  // namespace shardwise
