#pragma once
// gelu(x): the Gaussian error linear unit, exact or in the tanh approximation used by GPT-2 and
// Megatron (PyTorch's approximate='none' and 'tanh'):
//   exact:  gelu(x) = x/2 · (1 + erf(x/√2)),         gelu'(x) = (1 + erf(x/√2))/2 + x · φ(x)
//   tanh:   gelu(x) = x/2 · (1 + tanh(u)),   u = √(2/π) · (x + 0.044715 x³),
//           gelu'(x) = (1 + tanh(u))/2 + x/2 · (1 - tanh²(u)) · √(2/π) · (1 + 3 · 0.044715 x²)
// with φ the standard normal density; backward is dx = dy · gelu'(x).
// Element-wise and local to each rank (no communication), on any layout; padding stays zero. A
// partial-sum tensor does not compile: gelu of the addends, summed, is not gelu of the sum.
#include <Eigen/Core>
#include <concepts>
#include <numbers>
#include <unsupported/Eigen/SpecialFunctions>

#include "shardwise/core/element.hpp"
#include "shardwise/core/error.hpp"
#include "shardwise/layout/partial_sum.hpp"
#include "shardwise/tensor/binary_transform.hpp"
#include "shardwise/tensor/describe.hpp"
#include "shardwise/tensor/dtensor.hpp"
#include "shardwise/tensor/elementwise.hpp"

namespace shardwise {

namespace detail {

// Written on Eigen arrays, whole blocks at a time (transform_arrays), so that Eigen evaluates erf and exp
// a vector at a time: in float within 1e-6 of the exact formulas, in double as std::erf and std::exp.
template <value_element T>
struct gelu_exact {
  static constexpr T inverse_sqrt2 = T(std::numbers::sqrt2 / 2);
  static constexpr T inverse_sqrt_2pi = T(std::numbers::inv_sqrtpi * std::numbers::sqrt2 / 2);  // 1/√(2π)

  template <class Array>
  static auto value(const Array& x) {
    return T(0.5) * x * (T(1) + (x * inverse_sqrt2).erf());
  }
  template <class Array>
  static auto derivative(const Array& x) {
    return T(0.5) * (T(1) + (x * inverse_sqrt2).erf()) + x * inverse_sqrt_2pi * (T(-0.5) * x.square()).exp();
  }
};

// Through σ(2u) = (1 + tanh(u))/2 and σ(2u)·σ(-2u) = (1 - tanh²(u))/4, from e = exp(-2u): near tanh(u) = -1,
// 1 + t and 1 - t² are differences of nearly equal numbers, which turn Eigen's float tanh (3e-7 off)
// into errors of 4e-6 in the derivative, where e keeps its relative accuracy. 2u is held within ±80,
// where e stays finite and σ a normal number.
template <value_element T>
struct gelu_tanh {
  static constexpr T cubic = T(0.044715);
  static constexpr T slope = T(std::numbers::sqrt2 * std::numbers::inv_sqrtpi);  // √(2/π)

  template <class Array>
  static auto exp_of_minus_2u(const Array& x) {
    return (T(-2) * slope * (x + cubic * x.cube())).max(T(-80)).min(T(80)).exp();
  }
  template <class Array>
  static auto value(const Array& x) {
    return x * (T(1) + exp_of_minus_2u(x)).inverse();
  }
  template <class Array>
  static auto derivative(const Array& x) {
    const auto e = exp_of_minus_2u(x);
    const auto sigma = (T(1) + e).inverse();  // σ(2u), and σ(-2u) = e σ(2u)
    // σ(-2u) formed first: at most 1, where e alone times the polynomial exceeds float's range below x = -31.
    return sigma * (T(1) + T(2) * slope * x * (T(1) + T(3) * cubic * x.square()) * (e * sigma));
  }
};

// The kernels' declared work (tensor/elementwise.hpp): the arithmetic counted, a tanh, erf or exp as 8
// operations. At 4 + 4 bytes an element GeLU is memory-bound on every device modelled, whatever the count.
inline constexpr elementwise_cost gelu_cost{16, "GeLU"};
inline constexpr elementwise_cost gelu_backward_cost{24, "GeLU backward"};

}  // namespace detail

enum class gelu_approximation { tanh, none };

template <value_element T, class Layout, class Mesh>
requires(!is_partial_sum_v<Layout>)
[[nodiscard]] dtensor<T, Layout, Mesh> gelu(const dtensor<T, Layout, Mesh>& input,
                                            gelu_approximation approximation = gelu_approximation::tanh) try {
  using A = accumulator_t<T>;  // computed in float for bf16 elements
  return approximation == gelu_approximation::tanh
             ? transform_arrays(
                   input,
                   [](const auto& x) { return detail::gelu_tanh<A>::value(x.template cast<A>()).template cast<T>(); },
                   detail::gelu_cost)
             : transform_arrays(
                   input,
                   [](const auto& x) { return detail::gelu_exact<A>::value(x.template cast<A>()).template cast<T>(); },
                   detail::gelu_cost);
} catch (...) {
  rethrow_within_call(world_rank_of(input), call_text("gelu", describe(input)));
}

// dx from dy and the forward's input x.
template <value_element T, class Layout, class Mesh>
requires(!is_partial_sum_v<Layout>)
[[nodiscard]] dtensor<T, Layout, Mesh> gelu_backward(const dtensor<T, Layout, Mesh>& output_gradient,
                                                     const dtensor<T, Layout, Mesh>& input,
                                                     gelu_approximation approximation = gelu_approximation::tanh) try {
  using A = accumulator_t<T>;
  if (approximation == gelu_approximation::tanh)
    return transform_arrays(
        output_gradient, input,
        [](const auto& dy, const auto& x) {
          return (dy.template cast<A>() * detail::gelu_tanh<A>::derivative(x.template cast<A>())).template cast<T>();
        },
        detail::gelu_backward_cost);
  return transform_arrays(
      output_gradient, input,
      [](const auto& dy, const auto& x) {
        return (dy.template cast<A>() * detail::gelu_exact<A>::derivative(x.template cast<A>())).template cast<T>();
      },
      detail::gelu_backward_cost);
} catch (...) {
  rethrow_within_call(world_rank_of(input), call_text("gelu_backward", describe(output_gradient), describe(input)));
}

template <class T, class Layout, class Mesh>
requires is_partial_sum_v<Layout> auto gelu(  // gelu of addends, summed, is not gelu of the sum: reduce(t) first
    const dtensor<T, Layout, Mesh>&, gelu_approximation = {}) = delete;
template <class T, class Layout, class Mesh>
requires is_partial_sum_v<Layout> auto gelu_backward(  // gelu' of an addend is not gelu' of the sum: reduce(t) first
    const dtensor<T, Layout, Mesh>&, const dtensor<T, Layout, Mesh>&, gelu_approximation = {}) = delete;

}  // namespace shardwise
