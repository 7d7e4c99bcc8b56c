#pragma once
// nn::binary_cross_entropy<T, Layout, Mesh>: the loss of a click model, from logits z (one column, a
// row per sample) and labels y ∈ {0, 1}:
//   loss = Σ over samples of  max(z, 0) − z·y + log(1 + e^−|z|)     (= −y log σ(z) − (1 − y) log(1 − σ(z)))
//   d loss / dz = σ(z) − y
// written so that no exponential overflows. Each rank sums its own samples (its rows of the logits); the
// caller reduces over ranks and divides by the batch as its loss is defined.
#include <algorithm>
#include <cmath>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "shardwise/core/error.hpp"
#include "shardwise/core/kernel.hpp"
#include "shardwise/nn/no_grad.hpp"
#include "shardwise/nn/saved_for_backward.hpp"
#include "shardwise/tensor/describe.hpp"
#include "shardwise/tensor/dtensor.hpp"

namespace shardwise::nn {

template <class T, class Layout, class Mesh>
class binary_cross_entropy {
 public:
  using tensor_type = dtensor<T, Layout, Mesh>;

  // The sum of the losses of this rank's samples: `labels` are its rows' (the rows of logits.local()).
  [[nodiscard]] double forward(const tensor_type& logits, std::span<const T> labels) try {
    const auto z = logits.local();
    if (logits.cols() != 1 || static_cast<std::size_t>(z.rows()) != labels.size())
      throw argument_error(world_rank_of(logits), "nn::binary_cross_entropy::forward",
                           "needs one logit per sample and a label for each of this rank's " +
                               std::to_string(z.rows()) + " samples; got " + std::to_string(logits.cols()) +
                               " columns and " + std::to_string(labels.size()) + " labels");
    double sum = 0;
    probabilities_.resize(labels.size());
    const auto samples = static_cast<double>(labels.size());
    // Per sample the logit and the label read, the probability and the kept label written.
    run_kernel(logits.mesh().world(), {forward_operations * samples, 4 * sizeof(T) * samples}, "binary cross-entropy",
               [&] {
                 for (std::size_t s = 0; s < labels.size(); ++s) {
                   const T v = z(static_cast<Eigen::Index>(s), 0);
                   sum += static_cast<double>(std::max(v, T(0)) - v * labels[s] + std::log1p(std::exp(-std::abs(v))));
                   probabilities_[s] = v >= T(0) ? T(1) / (T(1) + std::exp(-v)) : std::exp(v) / (T(1) + std::exp(v));
                 }
                 labels_.assign(labels.begin(), labels.end());
               });
    logits_.emplace(logits.mesh(), logits.extents());
    world_rank_ = world_rank_of(logits);
    release_under_no_grad(logits_);
    return sum;
  } catch (...) {
    rethrow_within_call(world_rank_of(logits), call_text("nn::binary_cross_entropy::forward", describe(logits)));
  }

  // scale · (σ(z) − y) for each of this rank's samples: the gradient of scale × forward's sum.
  [[nodiscard]] tensor_type backward(T scale) try {
    const auto logits = take_saved(logits_, world_rank_, "nn::binary_cross_entropy::backward", "its probabilities");
    tensor_type gradient(logits.mesh(), logits.extents());
    auto g = gradient.local();
    const auto samples = static_cast<double>(labels_.size());
    // Per sample a difference and a product; the probability and the label read, the gradient written.
    run_kernel(gradient.mesh().world(), {2 * samples, 3 * sizeof(T) * samples}, "binary cross-entropy backward", [&] {
      for (std::size_t s = 0; s < labels_.size(); ++s)
        g(static_cast<Eigen::Index>(s), 0) = scale * (probabilities_[s] - labels_[s]);
    });
    return gradient;
  } catch (...) {
    rethrow_within_call(world_rank_, call_text("nn::binary_cross_entropy::backward"));
  }

  // σ(z) of forward's samples on this rank: the predicted click probabilities.
  [[nodiscard]] std::span<const T> probabilities() const noexcept { return probabilities_; }

 private:
  // Per sample: e^−|z|, its log1p and σ's exponential, 8 operations each (as ops/softmax.hpp counts an
  // exp), and 10 more: max, |z|, the negation, z·y, a difference, two additions, the comparison, 1 + e^z
  // and the division.
  static constexpr double forward_operations = 34;

  std::optional<tensor_type> logits_;  // the shape (and mesh) of forward's logits
  int world_rank_ = -1;                // forward's, which a backward's errors name (none before a forward)
  std::vector<T> probabilities_, labels_;
};

}  // namespace shardwise::nn
