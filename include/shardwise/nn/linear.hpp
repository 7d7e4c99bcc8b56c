#pragma once
// nn::linear<T, InputLayout, WeightLayout, Mesh>: y = x·W + b, forward and backward, distributed as
// the layouts say. The product rule for the two layouts (ops/matmul.hpp) gives the output layout, so
//   linear<T, cube_3d<>::input, cube_3d<>::weight, Mesh>::output_layout == cube_3d<>::output
// and a pair of layouts with no product rule does not compile. The bias lives in
// vector_layout_t<output_layout> (in 3-D the paper's diagonal storage).
//
// Backward, from dy:  dx = dy·Wᵀ,  dW = xᵀ·dy,  db = column sums of dy  (the input is kept from forward
// to backward: a copy of it, or the tensor itself when forward is given it to keep, by move or shared
// with other layers that read it; or the caller keeps it and gives it back, forward_without_keeping and
// backward_before_sum).
// Backward adds into the parameters' gradients (nn/parameter.hpp).
//
// Collective matmul (ops/collective_matmul.hpp), for 1-D tensor parallelism with sequence parallelism:
//   linear<T, col_1d<P>, row_1d<P>, Mesh>            x rows cut: y = all_gather_matmul(x, W), row_1d
//   linear<T, row_1d<P>, col_1d<P>, Mesh, col_1d<P>> y = matmul_reduce_scatter(x, W), rows cut (instead
//                                                    of the all-reduce to replicated)
// and their gradients by the same rings, or unfused, or whichever the layer's first calls measure faster
// (matmul_options::collective; ops/collective_matmul_choice.hpp). The constructor's matmul_options reach
// every product the layer runs (in 3-D, chunks pipelines each product in bands of rows).
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "shardwise/core/error.hpp"
#include "shardwise/layout/vector_layout.hpp"
#include "shardwise/nn/no_grad.hpp"
#include "shardwise/nn/parameter.hpp"
#include "shardwise/nn/saved_for_backward.hpp"
#include "shardwise/ops/add_vector.hpp"
#include "shardwise/ops/collective_matmul.hpp"
#include "shardwise/ops/collective_matmul_choice.hpp"
#include "shardwise/ops/matmul.hpp"
#include "shardwise/ops/vector_broadcast.hpp"
#include "shardwise/tensor/accumulate.hpp"
#include "shardwise/tensor/describe.hpp"
#include "shardwise/tensor/dtensor.hpp"
#include "shardwise/tensor/reduce.hpp"

namespace shardwise::nn {

namespace detail {
// A product that comes back as partial sums (the 1-D row-parallel product) is summed here.
template <class Tensor>
auto final_sum(Tensor&& t) {
  if constexpr (std::remove_cvref_t<Tensor>::is_partial_sum) {
    return reduce(std::forward<Tensor>(t));
  } else {
    return std::forward<Tensor>(t);
  }
}

// How a layer multiplies its input x by its weight W: gathering x in a ring when x's rows are cut over
// axis 0 and W's columns are (there is no plain product then), reduce-scattering in a ring when the
// layer asks for the row-parallel sum with its rows cut, else matmul with a pending sum all-reduced.
// The collective products take the form options.collective says, each product of the three (forward,
// the weight's gradient, the input's) choosing its own when that is automatic.
template <class InputLayout, class WeightLayout, class OutputLayout>
class linear_product {
 public:
  static constexpr bool gathers_input =
      shardwise::detail::all_gather_product<InputLayout, WeightLayout, false, false>::gathers_left;
  static constexpr bool scatters_output = [] {
    using rule = shardwise::detail::reduce_scatter_product<InputLayout, WeightLayout, false, false>;
    if constexpr (rule::exists) {
      return std::is_same_v<OutputLayout, typename rule::result>;
    } else {
      return false;
    }
  }();

  // The forms its collective products take (forward, the weight's gradient, the input's): the one
  // asked for, or each one's choice once made (automatic until then). A layer with no collective
  // product reports the form asked for.
  struct forms {
    collective_matmul_form forward, weight_gradient, input_gradient;
  };

  explicit linear_product(matmul_options options)
      : options_(options),
        forward_(options.collective),
        weight_gradient_(options.collective),
        input_gradient_(options.collective) {}

  template <class Input, class Weight>
  auto forward(const Input& x, const Weight& w) {
    if constexpr (gathers_input) {
      return std::get<0>(forward_each(x, std::tie(w)));
    } else if constexpr (scatters_output) {
      return forward_(x.mesh().world(), [&](collective_matmul_form form) { return matmul_reduce_scatter(x, w, form); });
    } else {
      return final_sum(matmul(x, w, options_));
    }
  }
  // Adds dW = xᵀ·dy into the weight's gradient and returns dx = dy·Wᵀ as the product gives it: a partial
  // sum where its inner dimension is cut and nothing sums it. A reduce-scattered output's gradient is
  // gathered once, in one ring, for both.
  template <class Input, class OutputGradient, class Weight>
  auto backward(const Input& x, const OutputGradient& dy, Weight& weight) {
    if constexpr (gathers_input) {
      return backward_each(x, std::tie(dy), weight);
    } else if constexpr (scatters_output) {
      auto both = weight_gradient_(x.mesh().world(), [&](collective_matmul_form form) {
        return all_gather_matmul_both_sides(transposed(x), dy, transposed(weight.value), form);
      });
      weight.add_gradient(both.first);
      return std::move(both.second);
    } else {
      weight.add_gradient(final_sum(matmul(transposed(x), dy, options_)));
      return matmul(dy, transposed(weight.value), options_);
    }
  }

  // Where the products gather x: x·Wᵢ for each weight of a tuple, x gathered once for all of them.
  template <class Input, class Weights>
  requires gathers_input auto forward_each(const Input& x, const Weights& weights) {
    return forward_(x.mesh().world(), [&](collective_matmul_form form) { return all_gather_matmul(x, weights, form); });
  }
  // Where the products gather x: adds dWᵢ = xᵀ·dyᵢ into each weight's gradient, x gathered once for all,
  // and returns Σᵢ dyᵢ·Wᵢᵀ, reduce-scattered once.
  template <class Input, class Gradients, class... Weights>
  requires gathers_input auto backward_each(const Input& x, const Gradients& dy, Weights&... weights) {
    auto& world = x.mesh().world();
    auto dw = weight_gradient_(world,
                               [&](collective_matmul_form form) { return all_gather_matmul(transposed(x), dy, form); });
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (weights.add_gradient(std::get<I>(dw)), ...);
    }(std::index_sequence_for<Weights...>{});
    return input_gradient_(world, [&](collective_matmul_form form) {
      return matmul_reduce_scatter(dy, std::tuple{transposed(weights.value)...}, form);
    });
  }

  // Takes `leader`'s choices (and any trial under way): linears whose products share one ring
  // (linear::forward_sharing_input) report the forms that ring takes.
  void follow(const linear_product& leader) {
    forward_ = leader.forward_;
    weight_gradient_ = leader.weight_gradient_;
    input_gradient_ = leader.input_gradient_;
  }

  [[nodiscard]] forms collective_forms() const noexcept {
    // A reduce-scattered output's two gradients come from one ring, the weight gradient's choice.
    return {forward_.form(), weight_gradient_.form(), (scatters_output ? weight_gradient_ : input_gradient_).form()};
  }

 private:
  matmul_options options_;
  collective_matmul_choice forward_, weight_gradient_, input_gradient_;
};
}  // namespace detail

// The default OutputLayout of nn::linear: what the product rule gives, a pending sum all-reduced.
struct product_rule_output {};

template <class T, class InputLayout, class WeightLayout, class Mesh, class OutputLayout = product_rule_output>
class linear {
  using product = detail::linear_product<InputLayout, WeightLayout, OutputLayout>;

 public:
  using input_type = dtensor<T, InputLayout, Mesh>;
  using weight_type = parameter<T, WeightLayout, Mesh>;
  using output_type = std::remove_cvref_t<decltype(std::declval<product&>().forward(
      std::declval<const input_type&>(), std::declval<const dtensor<T, WeightLayout, Mesh>&>()))>;
  using output_layout = typename output_type::layout_type;
  using bias_type = parameter<T, vector_layout_t<output_layout>, Mesh>;
  static_assert(std::is_same_v<OutputLayout, product_rule_output> || std::is_same_v<OutputLayout, output_layout>,
                "shardwise::nn::linear: the OutputLayout asked for is not one these input and weight layouts can "
                "give (a 1-D row-parallel linear gives col_1d with the operands' padding rule by reduce-scatter)");

  // inputs x outputs weights uniform in ±1/√inputs (as PyTorch's default), bias zero; `seed` names the
  // layer, so that distributed and serial models start equal. `options` go to every product.
  linear(Mesh& mesh, std::int64_t inputs, std::int64_t outputs, std::uint64_t seed, matmul_options options = {})
      : weight_(mesh, {inputs, outputs}, seed, static_cast<T>(1 / std::sqrt(static_cast<double>(inputs)))),
        bias_(mesh, {1, outputs}, T(0)),
        product_(options) {}

  // Keeps a copy of `x` for backward (none under nn::no_grad).
  [[nodiscard]] output_type forward(const input_type& x) {
    if (!no_grad::keeps_for_backward()) return without_input(x);
    return forward(std::make_shared<const input_type>(x));
  }
  // Keeps `x` itself.
  [[nodiscard]] output_type forward(input_type&& x) {
    return forward(std::make_shared<const input_type>(std::move(x)));
  }
  // Keeps `x` itself, shared with whoever else holds it; none of them may change it before backward.
  [[nodiscard]] output_type forward(std::shared_ptr<const input_type> x) {
    if (!x)
      throw argument_error(weight_.value.mesh().world().world_rank(), "nn::linear::forward",
                           "the input to keep is an empty shared pointer");
    if (!no_grad::keeps_for_backward()) return without_input(*x);
    input_ = std::move(x);
    return output_of(*input_);
  }

  // For a caller that keeps x itself and gives it back to backward_before_sum(dy, x): the sub-blocks,
  // whose first linears share one input (under sequence parallelism, cut by tokens; nn/sub_block.hpp).
  [[nodiscard]] output_type forward_without_keeping(const input_type& x) { return without_input(x); }
  // forward_without_keeping of several linears of this type that read one input x (Q, K and V): where
  // their products gather x (its rows cut, sequence parallelism), one ring gathers it for all of them,
  // as Megatron's one projection for Q, K and V does, in the form the first linear's products take
  // (its choice decides for all, and all report it in collective_forms()).
  template <std::size_t N>
  [[nodiscard]] static std::array<output_type, N> forward_sharing_input(const input_type& x,
                                                                        linear* const (&linears)[N]) {
    for (linear* layer : linears) layer->input_.reset();
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      if constexpr (product::gathers_input) {
        try {
          auto products = linears[0]->product_.forward_each(x, std::tie(linears[I]->weight_.value...));
          follow_the_first(linears);
          return std::array<output_type, N>{add_vector(std::move(std::get<I>(products)), linears[I]->bias_.value)...};
        } catch (...) {
          rethrow_within_forward(x);
        }
      } else {
        return std::array<output_type, N>{linears[I]->output_of(x)...};
      }
    }(std::make_index_sequence<N>{});
  }

  [[nodiscard]] input_type backward(const output_type& output_gradient) try {
    const auto input =
        take_saved(input_, weight_.value.mesh().world().world_rank(), "nn::linear::backward", "its input");
    return detail::final_sum(gradients(*input, {this}, {&output_gradient}));
  } catch (...) {
    rethrow_within_backward(output_gradient);
  }
  // After forward_without_keeping(input): the same, but the input gradient as the product gives it:
  // where its sum is still pending (a 1-D column-parallel linear's, a partial sum over the axis), it is
  // left so, for gradients that meet at a fork (x feeding Q, K and V) to be added first and reduced once.
  [[nodiscard]] auto backward_before_sum(const output_type& output_gradient, const input_type& input) {
    return backward_sharing_input(input, {this}, {&output_gradient});
  }
  // backward_before_sum of linears that read x in forward_sharing_input, given their output gradients in
  // the same order: their input gradients' sum, left pending where the products leave it so. Where the
  // products gather x, one ring gathers it again for all the weights' gradients and one reduce-scatters
  // the sum of the input gradients.
  template <std::size_t N>
  [[nodiscard]] static auto backward_sharing_input(const input_type& x, linear* const (&linears)[N],
                                                   const output_type* const (&output_gradients)[N]) try {
    return gradients(x, linears, output_gradients);
  } catch (...) {
    rethrow_within_backward(*output_gradients[0]);
  }

  [[nodiscard]] weight_type& weight() noexcept { return weight_; }
  [[nodiscard]] bias_type& bias() noexcept { return bias_; }
  // The forms of its collective products (matmul_options::collective), for layers whose rows are cut.
  [[nodiscard]] auto collective_forms() const noexcept { return product_.collective_forms(); }

  template <class F>
  void for_each_parameter(F&& f, const std::string& prefix = "") {
    f(prefix + "weight", weight_);
    f(prefix + "bias", bias_);
  }

 private:
  [[nodiscard]] output_type output_of(const input_type& x) try {
    return add_vector(product_.forward(x, weight_.value), bias_.value);
  } catch (...) {
    rethrow_within_forward(x);
  }
  // Adds the parameters' gradients; returns the sum of the input's addends.
  template <std::size_t N>
  [[nodiscard]] static auto gradients(const input_type& x, linear* const (&linears)[N],
                                      const output_type* const (&output_gradients)[N]) {
    // y = x·W + b: the product's gradient is dy itself (not a copy), the bias's dy's column sums.
    const auto bias_gradient = [&](std::size_t i) {
      linears[i]->bias_.add_gradient(column_sums(*output_gradients[i]));
    };
    if constexpr (product::gathers_input) {
      for (std::size_t i = 0; i < N; ++i) bias_gradient(i);
      auto input_gradient = [&]<std::size_t... I>(std::index_sequence<I...>) {
        return linears[0]->product_.backward_each(x, std::tie(*output_gradients[I]...), linears[I]->weight_...);
      }(std::make_index_sequence<N>{});
      follow_the_first(linears);
      return input_gradient;
    } else {
      const auto input_addend = [&](std::size_t i) {
        bias_gradient(i);
        return linears[i]->product_.backward(x, *output_gradients[i], linears[i]->weight_);
      };
      auto sum = input_addend(0);
      for (std::size_t i = 1; i < N; ++i) accumulate(sum, input_addend(i));
      return sum;
    }
  }
  template <std::size_t N>
  static void follow_the_first(linear* const (&linears)[N]) {
    for (std::size_t i = 1; i < N; ++i) linears[i]->product_.follow(linears[0]->product_);
  }
  [[noreturn]] static void rethrow_within_forward(const input_type& x) {
    rethrow_within_call(world_rank_of(x), call_text("nn::linear::forward", describe(x)));
  }
  [[noreturn]] static void rethrow_within_backward(const output_type& output_gradient) {
    rethrow_within_call(world_rank_of(output_gradient), call_text("nn::linear::backward", describe(output_gradient)));
  }
  // The last forward's input given back too, so a backward cannot pair with it.
  [[nodiscard]] output_type without_input(const input_type& x) {
    input_.reset();
    return output_of(x);
  }

  weight_type weight_;
  bias_type bias_;
  product product_;
  std::shared_ptr<const input_type> input_;
};

}  // namespace shardwise::nn
