#pragma once
// nn::language_model_loss<T, Family, Mesh>: a language model's output head tied to its token embedding
// (logits = h · tableᵀ) and the cross-entropy of the next tokens, computed with the vocabulary cut over
// the mesh (ops/vocabulary_cross_entropy.hpp): no rank ever holds the whole logits. The head has no
// parameter of its own; backward adds into the embedding table's gradient, beside the lookup's.
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "shardwise/core/error.hpp"
#include "shardwise/nn/family.hpp"
#include "shardwise/nn/no_grad.hpp"
#include "shardwise/nn/parameter.hpp"
#include "shardwise/nn/saved_for_backward.hpp"
#include "shardwise/ops/vocabulary_cross_entropy.hpp"
#include "shardwise/tensor/describe.hpp"
#include "shardwise/tensor/distribute.hpp"

namespace shardwise::nn {

template <class T, class Family, class Mesh>
class language_model_loss {
 public:
  using table_type = parameter<T, typename Family::vocabulary, Mesh>;
  using input_type = dtensor<T, typename Family::input, Mesh>;

  explicit language_model_loss(table_type& table) : table_(&table) {}

  // The mean cross-entropy in nats per token of `targets` (one per row of h), equal on every rank.
  [[nodiscard]] double forward(const input_type& h, std::span<const std::int32_t> targets) try {
    const double loss = vocabulary_cross_entropy(redistribute<replicated<>>(h), table_->value, targets, saved_);
    release_under_no_grad(saved_);
    return loss;
  } catch (...) {
    rethrow_within_call(world_rank_of(h), call_text("nn::language_model_loss::forward", describe(h),
                                                    std::to_string(targets.size()) + " targets"));
  }

  // The gradient of forward's loss times `scale`, in h's layout; adds the table's into its gradient.
  [[nodiscard]] input_type backward(T scale = T(1)) try {
    const auto saved = take_saved(saved_, table_->value.mesh().world().world_rank(),
                                  "nn::language_model_loss::backward", "the probabilities");
    return vocabulary_cross_entropy_backward<typename Family::input>(saved, table_->value, table_->gradient, scale);
  } catch (...) {
    rethrow_within_call(world_rank_of(table_->value), call_text("nn::language_model_loss::backward"));
  }

 private:
  table_type* table_;
  std::optional<cross_entropy_saved<T, Mesh>> saved_;
};

}  // namespace shardwise::nn
