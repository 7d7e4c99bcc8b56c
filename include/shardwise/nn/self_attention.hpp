#pragma once
// nn::self_attention<T, Family, Mesh>: multi-head self-attention, forward and backward, in a
// tensor-parallel family (nn/family.hpp):
//   Q, K, V = x·W_q + b_q, x·W_k + b_k, x·W_v + b_v    first linears: input -> hidden layout
//   O = attention(Q, K, V) per sample and head           local (ops/attention.hpp)
//   y = O·W_o + b_o                                      second linear: hidden -> input layout
// The hidden layout keeps whole samples and whole heads on a rank when the batch divides by the
// ranks the rows are cut over and the heads by the ranks the columns are cut over (the table in
// ops/attention.hpp); other shapes throw argument_error from the first forward, naming the rule.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "shardwise/core/error.hpp"
#include "shardwise/nn/no_grad.hpp"
#include "shardwise/nn/saved_for_backward.hpp"
#include "shardwise/nn/sub_block.hpp"
#include "shardwise/ops/attention.hpp"
#include "shardwise/tensor/describe.hpp"

namespace shardwise::nn {

struct attention_options {
  std::int64_t hidden = 0;  // model width; heads * head_dim
  std::int64_t heads = 1;
  std::int64_t sequence = 1;  // rows per sample
  bool causal = false;
  // Kept for the backward pass, or computed again there from the queries and keys (ops/attention.hpp).
  attention_probabilities probabilities = attention_probabilities::kept;
};

template <class T, class Family, class Mesh>
class self_attention {
  using linears = sub_block_linears<T, Family, Mesh>;
  using first_linear = typename linears::first;
  using second_linear = typename linears::second;

 public:
  using tensor_type = dtensor<T, typename Family::input, Mesh>;

  // `seed` names the layer; its four linears take seed + 1 ... seed + 4, and `products` (ops/matmul.hpp).
  self_attention(Mesh& mesh, const attention_options& options, std::uint64_t seed, matmul_options products = {})
      : shape_(checked_shape(mesh, options)),
        probabilities_(options.probabilities),
        query_(mesh, options.hidden, options.hidden, seed + 1, products),
        key_(mesh, options.hidden, options.hidden, seed + 2, products),
        value_(mesh, options.hidden, options.hidden, seed + 3, products),
        output_(mesh, options.hidden, options.hidden, seed + 4, products) {}

  // The layer keeps its input once for the three projections: a copy of `x`, or `x` itself when given to
  // keep; under sequence parallelism that is x cut by tokens, gathered for the projections (one ring for
  // the three) here and again in the backward.
  [[nodiscard]] tensor_type forward(const tensor_type& x) { return forward(tensor_type(x)); }
  [[nodiscard]] tensor_type forward(tensor_type&& x) {
    auto given = std::make_shared<const tensor_type>(std::move(x));
    try {
      kept_.reset();  // the last forward's, given back first
      auto [q, k, v] = first_linear::forward_sharing_input(*given, {&query_, &key_, &value_});
      auto& kept = kept_.emplace(kept_for_backward{given, std::move(q), std::move(k), std::move(v), {}});
      auto heads = attention_forward(kept.q, kept.k, kept.v, shape_, kept.attention, probabilities_);
      release_under_no_grad(kept_);  // before the output projection: nothing after reads them
      return output_.forward(std::move(heads));
    } catch (...) {
      rethrow_within_call(world_rank_of(*given), call_text("nn::self_attention::forward", describe(*given)));
    }
  }

  [[nodiscard]] tensor_type backward(const tensor_type& output_gradient) try {
    auto kept = take_saved(kept_, world_rank_of(output_gradient), "nn::self_attention::backward",
                           "its input, queries, keys, values and attention probabilities");
    const auto heads_gradient = output_.backward(output_gradient);
    // The probabilities are given back as soon as attention's backward has read them.
    const auto g =
        attention_backward(kept.q, kept.k, kept.v, heads_gradient, shape_, std::exchange(kept.attention, {}));
    return linears::input_gradient(
        first_linear::backward_sharing_input(*kept.input, {&query_, &key_, &value_}, {&g.q, &g.k, &g.v}));
  } catch (...) {
    rethrow_within_call(world_rank_of(output_gradient),
                        call_text("nn::self_attention::backward", describe(output_gradient)));
  }

  template <class F>
  void for_each_parameter(F&& f, const std::string& prefix = "") {
    query_.for_each_parameter(f, prefix + "query.");
    key_.for_each_parameter(f, prefix + "key.");
    value_.for_each_parameter(f, prefix + "value.");
    output_.for_each_parameter(f, prefix + "output.");
  }

 private:
  static attention_shape checked_shape(Mesh& mesh, const attention_options& options) {
    if (options.heads < 1 || options.hidden % options.heads != 0)
      throw argument_error(mesh.world().world_rank(), "nn::self_attention",
                           "the width " + std::to_string(options.hidden) + " does not split into " +
                               std::to_string(options.heads) + " heads");
    return {options.sequence, options.hidden / options.heads, options.causal};
  }

  attention_shape shape_;
  attention_probabilities probabilities_;
  first_linear query_, key_, value_;
  second_linear output_;
  struct kept_for_backward {
    std::shared_ptr<const tensor_type> input;
    typename first_linear::output_type q, k, v;
    attention_saved<T> attention;
  };
  std::optional<kept_for_backward> kept_;
};

}  // namespace shardwise::nn
