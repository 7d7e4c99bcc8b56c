#pragma once
// nn::mlp<T, Family, Mesh>: the Transformer's feed-forward sub-block, y = GeLU(x·W1 + b1)·W2 + b2, with
// the first linear input -> hidden and the second hidden -> input in a tensor-parallel family
// (nn/family.hpp). GeLU is local in every family.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "shardwise/nn/no_grad.hpp"
#include "shardwise/nn/saved_for_backward.hpp"
#include "shardwise/nn/sub_block.hpp"
#include "shardwise/ops/gelu.hpp"
#include "shardwise/tensor/describe.hpp"

namespace shardwise::nn {

template <class T, class Family, class Mesh>
class mlp {
  using linears = sub_block_linears<T, Family, Mesh>;
  using first_linear = typename linears::first;
  using second_linear = typename linears::second;

 public:
  using tensor_type = dtensor<T, typename Family::input, Mesh>;

  // hidden -> expanded -> hidden; `seed` names the layer, its linears take seed + 1 and seed + 2, and
  // `products` (ops/matmul.hpp).
  mlp(Mesh& mesh, std::int64_t hidden, std::int64_t expanded, std::uint64_t seed, matmul_options products = {},
      gelu_approximation activation = gelu_approximation::tanh)
      : expand_(mesh, hidden, expanded, seed + 1, products),
        contract_(mesh, expanded, hidden, seed + 2, products),
        activation_(activation) {}

  // The layer keeps a copy of `x`, or `x` itself when given to keep; under sequence parallelism that is x
  // cut by tokens, gathered for the first linear's product (in its ring) here and again in the backward.
  [[nodiscard]] tensor_type forward(const tensor_type& x) { return forward(tensor_type(x)); }
  [[nodiscard]] tensor_type forward(tensor_type&& x) {
    auto given = std::make_shared<const tensor_type>(std::move(x));
    try {
      kept_.reset();  // the last forward's, given back first
      auto& kept = kept_.emplace(kept_for_backward{given, expand_.forward_without_keeping(*given)});
      auto y = contract_.forward(gelu(kept.pre_activation, activation_));
      release_under_no_grad(kept_);
      return y;
    } catch (...) {
      rethrow_within_call(world_rank_of(*given), call_text("nn::mlp::forward", describe(*given)));
    }
  }

  [[nodiscard]] tensor_type backward(const tensor_type& output_gradient) try {
    auto kept = take_saved(kept_, world_rank_of(output_gradient), "nn::mlp::backward", "its input and pre-activation");
    const auto hidden_gradient = gelu_backward(contract_.backward(output_gradient), kept.pre_activation, activation_);
    return linears::input_gradient(expand_.backward_before_sum(hidden_gradient, *kept.input));
  } catch (...) {
    rethrow_within_call(world_rank_of(output_gradient), call_text("nn::mlp::backward", describe(output_gradient)));
  }

  template <class F>
  void for_each_parameter(F&& f, const std::string& prefix = "") {
    expand_.for_each_parameter(f, prefix + "expand.");
    contract_.for_each_parameter(f, prefix + "contract.");
  }

 private:
  first_linear expand_;
  second_linear contract_;
  gelu_approximation activation_;
  struct kept_for_backward {
    std::shared_ptr<const tensor_type> input;
    typename first_linear::output_type pre_activation;
  };
  std::optional<kept_for_backward> kept_;
};

}  // namespace shardwise::nn
