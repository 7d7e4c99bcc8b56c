#pragma once
// model::gpt<T, Family, Mesh>: a GPT language model in one tensor-parallel family (nn/family.hpp), on
// the family's mesh (the tensor-parallel group; data parallelism is the update's, optim/sharded.hpp):
//
//   x = token_embedding[tokens] + position_embedding[positions]     vocabulary split over the mesh
//   x = block_l(x) for l = 0 .. layers-1                              pre-norm Transformer blocks
//   loss = cross_entropy(final_norm(x) · token_embeddingᵀ, targets)   tied head, vocabulary-parallel
//
// as GPT-2 and nanoGPT write it. The logits are never whole on a rank: each holds its shard of the
// vocabulary, and the loss reduces the maximum and the sum of exponentials over the shards.
//
//   model::gpt<float, nn::tensor_parallel_1d<>, decltype(mesh)> model(mesh, {.hidden = 128, .layers = 4});
//   double loss = model.forward(tokens, targets);    // batch x context ids, the same on every rank
//   model.backward();                                // adds into every parameter's gradient
//
// Parameters are named "embedding.token.weight", "blocks.3.attention.query.weight", "final_norm.bias",
// ... (for_each_parameter); the head has none of its own (tied).
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "shardwise/core/error.hpp"
#include "shardwise/nn/embedding.hpp"
#include "shardwise/nn/family.hpp"
#include "shardwise/nn/language_model_loss.hpp"
#include "shardwise/nn/layer_norm.hpp"
#include "shardwise/nn/transformer_block.hpp"
#include "shardwise/ops/gelu.hpp"
#include "shardwise/ops/matmul.hpp"

namespace shardwise::model {

struct gpt_config {
  std::int64_t vocabulary = 256;
  std::int64_t context = 128;  // tokens per sample; the position embedding's length
  std::int64_t hidden = 128;
  std::int64_t heads = 4;
  std::int64_t layers = 4;
  std::int64_t expansion = 4;  // the MLP's width is expansion * hidden
  double layer_norm_epsilon = 1e-5;
  gelu_approximation activation = gelu_approximation::none;
  // What each block computes again in the backward pass instead of keeping (nn/recomputation.hpp):
  // attention's probabilities (attention), or everything but the block's input (block).
  nn::recomputation recompute = nn::recomputation::none;
  // How the blocks' products run (ops/matmul.hpp): the 3-D product in bands, SUMMA's broadcasts ahead
  // or in turn, and the form of the sequence-parallel family's collective products (ring, unfused, or
  // automatic: measured).
  matmul_options products{};
  std::uint64_t seed = 1;  // of the initial weights: the same seed is the same model on every mesh

  friend bool operator==(const gpt_config&, const gpt_config&) = default;
};

// Parameters of a model of this config, all elements counted once.
[[nodiscard]] inline std::int64_t parameter_count(const gpt_config& c) {
  const std::int64_t h = c.hidden;
  const std::int64_t block = 2 * (2 * h)                                                             // two layer norms
                             + 4 * (h * h + h)                                                       // Q, K, V, O
                             + (h * c.expansion * h + c.expansion * h) + (c.expansion * h * h + h);  // MLP
  return c.vocabulary * h + c.context * h + c.layers * block + 2 * h;
}

// "8 blocks of width 1536, 16 heads, context 1024, vocabulary 50304": the sizes of a model of this config.
[[nodiscard]] inline std::string describe(const gpt_config& c) {
  return std::to_string(c.layers) + (c.layers == 1 ? " block" : " blocks") + " of width " + std::to_string(c.hidden) +
         ", " + std::to_string(c.heads) + " heads, context " + std::to_string(c.context) + ", vocabulary " +
         std::to_string(c.vocabulary);
}

// Floating-point operations of one training step per token (forward and backward), as PaLM's MFU
// counts them: 6 per weight of every product (the tied head included, the embedding lookups not) plus
// attention's 12 · layers · hidden · context.
[[nodiscard]] inline double training_flops_per_token(const gpt_config& c) {
  const double h = static_cast<double>(c.hidden);
  const double product_weights =
      static_cast<double>(c.layers) * (4 * h * h + 2 * static_cast<double>(c.expansion) * h * h) +
      static_cast<double>(c.vocabulary) * h;
  return 6 * product_weights + 12 * static_cast<double>(c.layers) * h * static_cast<double>(c.context);
}

template <class T, class Family, class Mesh>
class gpt {
  static_assert(nn::tensor_parallel_family<Family, Mesh::dimensions>,
                "shardwise::model::gpt: the family (nn/family.hpp) is for meshes of another number of dimensions "
                "than this mesh: tensor_parallel_1d, _2d, _3d need 1-, 2- and 3-D meshes");

 public:
  using activation_type = dtensor<T, typename Family::input, Mesh>;
  using block_type = nn::transformer_block<T, Family, Mesh>;

  // Not movable: the head keeps the embedding's table by address.
  gpt(const gpt&) = delete;
  gpt& operator=(const gpt&) = delete;

  gpt(Mesh& mesh, const gpt_config& config)
      : mesh_(&mesh),
        config_(checked(mesh, config)),
        embedding_(mesh, config.vocabulary, config.context, config.hidden, config.seed * 1000),
        final_norm_(mesh, config.hidden, static_cast<T>(config.layer_norm_epsilon)),
        loss_(embedding_.token_table()) {
    blocks_.reserve(static_cast<std::size_t>(config.layers));
    for (std::int64_t l = 0; l < config.layers; ++l)
      blocks_.emplace_back(mesh,
                           nn::block_options{.hidden = config.hidden,
                                             .heads = config.heads,
                                             .sequence = config.context,
                                             .expansion = config.expansion,
                                             .causal = true,
                                             .layer_norm_epsilon = config.layer_norm_epsilon,
                                             .activation = config.activation,
                                             .recompute = config.recompute,
                                             .products = config.products},
                           config.seed * 1000 + 1 + static_cast<std::uint64_t>(l));
    embedding_parameters_ = parameters_of(embedding_);
    block_parameters_ = blocks_.empty() ? 0 : parameters_of(blocks_.front());
    final_norm_parameters_ = parameters_of(final_norm_);
  }

  [[nodiscard]] const gpt_config& config() const noexcept { return config_; }
  [[nodiscard]] Mesh& mesh() const noexcept { return *mesh_; }

  // The mean cross-entropy (nats per token) of predicting `targets` from `tokens`: samples of
  // config().context ids each, back to back, the same on every rank of the mesh. Keeps what backward needs.
  [[nodiscard]] double forward(std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets) try {
    return loss_.forward(hidden_states(tokens), targets);
  } catch (...) {
    rethrow_within_call(mesh_->world().world_rank(),
                        call_text("model::gpt::forward", std::to_string(tokens.size()) + " tokens",
                                  std::to_string(targets.size()) + " targets"));
  }

  // Adds the gradient of forward's loss, times `scale` (1 / micro-batches when they accumulate), into
  // every parameter's gradient.
  void backward(T scale = T(1)) {
    backward(scale, [](std::size_t, std::size_t) {});
  }
  // The same, calling ready(first, count) as soon as the gradients of parameters [first, first + count)
  // (in for_each_parameter's order) are complete, so that their reduction can start while the pass goes
  // on (optim::data_parallel_update::gradients_ready): the final norm's first, then each block's from
  // the last, and the embedding's last, since the head (tied to it) adds into it too.
  template <class Ready>
  requires std::invocable<Ready&, std::size_t, std::size_t> void backward(T scale, Ready&& ready) try {
    // The first parameter after those not yet final.
    std::size_t next = embedding_parameters_ + block_parameters_ * blocks_.size();
    activation_type gradient = final_norm_.backward(loss_.backward(scale));
    ready(next, final_norm_parameters_);
    for (auto b = blocks_.rbegin(); b != blocks_.rend(); ++b) {
      gradient = b->backward(gradient);
      next -= block_parameters_;
      ready(next, block_parameters_);
    }
    embedding_.backward(gradient);
    ready(std::size_t{0}, embedding_parameters_);
  } catch (...) {
    rethrow_within_call(mesh_->world().world_rank(), call_text("model::gpt::backward"));
  }

  // The final hidden states of `tokens` (samples of config().context ids), before the head.
  [[nodiscard]] activation_type hidden_states(std::span<const std::int32_t> tokens) {
    activation_type x = embedding_.forward(tokens, config_.context);
    for (auto& block : blocks_) x = block.forward(x);
    return final_norm_.forward(x);
  }

  // f(name, parameter) for every parameter.
  template <class F>
  void for_each_parameter(F&& f, const std::string& prefix = "") {
    embedding_.for_each_parameter(f, prefix + "embedding.");
    for (std::size_t l = 0; l < blocks_.size(); ++l)
      blocks_[l].for_each_parameter(f, prefix + "blocks." + std::to_string(l) + ".");
    final_norm_.for_each_parameter(f, prefix + "final_norm.");
  }

  [[nodiscard]] auto& embedding() noexcept { return embedding_; }
  [[nodiscard]] auto& loss() noexcept { return loss_; }

 private:
  template <class Layer>
  static std::size_t parameters_of(Layer& layer) {
    std::size_t count = 0;
    layer.for_each_parameter([&](const std::string&, auto&) { ++count; });
    return count;
  }

  static const gpt_config& checked(Mesh& mesh, const gpt_config& c) {
    const auto fail = [&](const std::string& what) {
      throw argument_error(mesh.world().world_rank(), "model::gpt", what);
    };
    if (c.vocabulary < 1 || c.context < 1 || c.hidden < 1 || c.heads < 1 || c.layers < 0 || c.expansion < 1)
      fail("sizes must be positive: vocabulary " + std::to_string(c.vocabulary) + ", context " +
           std::to_string(c.context) + ", hidden " + std::to_string(c.hidden) + ", heads " + std::to_string(c.heads) +
           ", layers " + std::to_string(c.layers) + ", expansion " + std::to_string(c.expansion));
    if (c.hidden % c.heads != 0)
      fail("the width " + std::to_string(c.hidden) + " does not split into " + std::to_string(c.heads) + " heads");
    return c;
  }

  Mesh* mesh_;
  gpt_config config_;
  nn::embedding<T, Family, Mesh> embedding_;
  std::vector<block_type> blocks_;
  nn::layer_norm<T, typename Family::input, Mesh> final_norm_;
  nn::language_model_loss<T, Family, Mesh> loss_;
  // How many parameters each part has, in for_each_parameter's order (backward's ready calls).
  std::size_t embedding_parameters_ = 0, block_parameters_ = 0, final_norm_parameters_ = 0;
};

}  // namespace shardwise::model
