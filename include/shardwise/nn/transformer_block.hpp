#pragma once
// nn::transformer_block<T, Family, Mesh>: a pre-norm Transformer layer (GPT-2's order),
//   h = x + self_attention(layer_norm_1(x)),   y = h + mlp(layer_norm_2(h)),
// forward and backward, in one tensor-parallel family (nn/family.hpp). The output has the input's
// layout, so blocks stack; in 3-D the y/z swap inside each sub-block is carried by the types.
//
//   using block = nn::transformer_block<float, nn::tensor_parallel_3d<>, Mesh>;
//   block layer(mesh, {.hidden = 64, .heads = 4, .sequence = 16}, /*seed*/ 1);
//   auto y = layer.forward(x);                 // x: dtensor<float, cube_3d<>::input, Mesh>
//   auto dx = layer.backward(dy);              // parameters' gradients filled
//   layer.for_each_parameter([](const std::string& name, auto& p) { p.descend(0.01f); });
//
// options.recompute (nn/recomputation.hpp) trades arithmetic for memory: with recomputation::block
// the block keeps only its input from the forward pass and runs the forward again at the start of its
// backward (Megatron's full recompute, torch.utils.checkpoint round a layer), so a model holds one
// block's activations at a time rather than every block's, for one more forward pass per step; with
// recomputation::attention it keeps all but attention's probabilities, which the backward computes
// again (Megatron's selective recompute). The gradients are the same bits.
#include <cstdint>
#include <optional>
#include <string>

#include "shardwise/nn/family.hpp"
#include "shardwise/nn/layer_norm.hpp"
#include "shardwise/nn/mlp.hpp"
#include "shardwise/nn/no_grad.hpp"
#include "shardwise/nn/recomputation.hpp"
#include "shardwise/nn/saved_for_backward.hpp"
#include "shardwise/nn/self_attention.hpp"
#include "shardwise/ops/matmul.hpp"
#include "shardwise/tensor/accumulate.hpp"
#include "shardwise/tensor/describe.hpp"

namespace shardwise::nn {

struct block_options {
  std::int64_t hidden = 0;
  std::int64_t heads = 1;
  std::int64_t sequence = 1;
  std::int64_t expansion = 4;  // the MLP's width is expansion * hidden
  bool causal = false;
  double layer_norm_epsilon = 1e-5;
  gelu_approximation activation = gelu_approximation::tanh;
  recomputation recompute = recomputation::none;  // what the backward computes again instead of keeping
  // How its linears' products run (ops/matmul.hpp): in bands (3-D), SUMMA's broadcasts ahead of the
  // products or in turn (2-D), and sequence parallelism's collective products as rings, unfused, or as
  // each one's first calls measure faster.
  matmul_options products{};
};

template <class T, class Family, class Mesh>
class transformer_block {
 public:
  using tensor_type = dtensor<T, typename Family::input, Mesh>;

  // `seed` names the block; its layers take seeds from seed * 16 on.
  transformer_block(Mesh& mesh, const block_options& options, std::uint64_t seed)
      : norm_1_(mesh, options.hidden, static_cast<T>(options.layer_norm_epsilon)),
        attention_(mesh,
                   {options.hidden, options.heads, options.sequence, options.causal,
                    options.recompute == recomputation::attention ? attention_probabilities::recomputed
                                                                  : attention_probabilities::kept},
                   seed * 16, options.products),
        norm_2_(mesh, options.hidden, static_cast<T>(options.layer_norm_epsilon)),
        mlp_(mesh, options.hidden, options.expansion * options.hidden, seed * 16 + 8, options.products,
             options.activation),
        recompute_block_(options.recompute == recomputation::block) {}

  [[nodiscard]] tensor_type forward(const tensor_type& x) try {
    if (!recompute_block_) return forward_pass(x);
    const bool keeping = no_grad::keeps_for_backward();
    input_.reset();
    tensor_type y = [&] {
      const no_grad recomputed_in_backward;
      return forward_pass(x);
    }();
    if (keeping) input_.emplace(x);
    return y;
  } catch (...) {
    rethrow_within_call(world_rank_of(x), call_text("nn::transformer_block::forward", describe(x)));
  }

  // Each residual passes the gradient straight through and adds its branch's.
  [[nodiscard]] tensor_type backward(const tensor_type& output_gradient) try {
    if (recompute_block_)
      (void)forward_pass(take_saved(input_, world_rank_of(output_gradient), "nn::transformer_block::backward",
                                    "its input (recomputation::block)"));
    tensor_type h_gradient = norm_2_.backward(mlp_.backward(output_gradient));
    accumulate(h_gradient, output_gradient);
    tensor_type x_gradient = norm_1_.backward(attention_.backward(h_gradient));
    accumulate(x_gradient, h_gradient);
    return x_gradient;
  } catch (...) {
    rethrow_within_call(world_rank_of(output_gradient),
                        call_text("nn::transformer_block::backward", describe(output_gradient)));
  }

  // f(name, parameter) for each parameter, named "<prefix>norm_1.weight", "<prefix>attention.query.bias", ...
  template <class F>
  void for_each_parameter(F&& f, const std::string& prefix = "") {
    norm_1_.for_each_parameter(f, prefix + "norm_1.");
    attention_.for_each_parameter(f, prefix + "attention.");
    norm_2_.for_each_parameter(f, prefix + "norm_2.");
    mlp_.for_each_parameter(f, prefix + "mlp.");
  }

 private:
  [[nodiscard]] tensor_type forward_pass(const tensor_type& x) {
    tensor_type h = attention_.forward(norm_1_.forward(x));
    accumulate(h, x);
    tensor_type y = mlp_.forward(norm_2_.forward(h));
    accumulate(y, h);
    return y;
  }

  layer_norm<T, typename Family::input, Mesh> norm_1_;
  self_attention<T, Family, Mesh> attention_;
  layer_norm<T, typename Family::input, Mesh> norm_2_;
  mlp<T, Family, Mesh> mlp_;
  bool recompute_block_;
  std::optional<tensor_type> input_;  // with recompute_block_: what the forward keeps
};

}  // namespace shardwise::nn
