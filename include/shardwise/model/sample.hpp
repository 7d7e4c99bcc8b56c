#pragma once
// sample(model, prompt, count, seed): continues `prompt` by `count` tokens drawn from the model's
// next-token distribution (temperature 1), as nanoGPT's generate does. Collective over the model's
// mesh: every rank computes the same logits (gathered) and draws the same token from a counter-based
// generator, so all of them return the same text.
//
// The model reads whole samples of config().context tokens: the prompt fills the window from the left
// and the rest is padding that causal attention never lets the prediction see; once the window is
// full it slides. The family's layout may cut the samples over mesh axes, so as many continuations as
// those axes have parts run together, each its own draws; the first is returned.
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "shardwise/core/counter_random.hpp"
#include "shardwise/model/gpt.hpp"
#include "shardwise/nn/no_grad.hpp"
#include "shardwise/tensor/distribute.hpp"

namespace shardwise::model {

template <class T, class Family, class Mesh, class Token>
[[nodiscard]] std::vector<Token> sample(gpt<T, Family, Mesh>& model, std::span<const Token> prompt, long count,
                                        std::uint64_t seed) {
  const nn::no_grad sampling;  // the forward passes keep nothing for a backward
  const std::int64_t context = model.config().context;
  std::int64_t samples = 1;  // the parts the family cuts the rows into: one sample each
  for (const std::size_t a : Family::input::row_axes) samples *= model.mesh().shape()[a];

  std::vector<std::vector<std::int32_t>> texts(static_cast<std::size_t>(samples));
  for (auto& text : texts) text.assign(prompt.begin(), prompt.end());
  const auto table = all_gather(model.embedding().token_table().value);  // vocabulary x hidden
  std::vector<std::int32_t> window(static_cast<std::size_t>(samples * context));
  for (long drawn = 0; drawn < count; ++drawn) {
    const auto known =
        static_cast<std::int64_t>(std::min<std::size_t>(texts[0].size(), static_cast<std::size_t>(context)));
    for (std::int64_t s = 0; s < samples; ++s) {
      const auto& text = texts[static_cast<std::size_t>(s)];
      std::fill_n(window.begin() + s * context, context, 0);
      std::copy(text.end() - known, text.end(), window.begin() + s * context);
    }
    const auto hidden = all_gather(model.hidden_states(window));
    for (std::int64_t s = 0; s < samples; ++s) {
      const Eigen::Matrix<T, 1, Eigen::Dynamic> logits = hidden.row(s * context + known - 1) * table.transpose();
      const T largest = logits.maxCoeff();
      const Eigen::Matrix<double, 1, Eigen::Dynamic> weights = (logits.array() - largest).exp().template cast<double>();
      double threshold = uniform_at(seed, drawn, s) * weights.sum();
      std::int32_t token = 0;
      while (token + 1 < weights.size() && (threshold -= weights(token)) >= 0) ++token;
      texts[static_cast<std::size_t>(s)].push_back(token);
    }
  }
  return {texts[0].begin() + static_cast<std::ptrdiff_t>(prompt.size()), texts[0].end()};
}

}  // namespace shardwise::model
