#pragma once
// sample(model, prompt, count, seed, how): continues `prompt` by `count` tokens drawn from the model's
// next-token distribution, as nanoGPT's generate does: the logits divided by `how.temperature` (0 takes
// the likeliest token), the draw among the `how.top_k` likeliest tokens (0: among all). Collective over
// the model's mesh: every rank computes the same logits (gathered) and draws the same token from a
// counter-based generator, so all of them return the same text.
//
// The model reads whole samples of config().context tokens: the prompt fills the window from the left
// and the rest is padding that causal attention never lets the prediction see; once the window is
// full it slides. The family's layout may cut the samples over mesh axes, so as many continuations as
// those axes have parts run together, each its own draws; the first is returned.
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "shardwise/core/counter_random.hpp"
#include "shardwise/core/error.hpp"
#include "shardwise/model/gpt.hpp"
#include "shardwise/nn/no_grad.hpp"
#include "shardwise/tensor/distribute.hpp"

namespace shardwise::model {

// How sample() draws each token from the logits.
struct sampling {
  double temperature = 1;  // the logits are divided by it: below 1 sharper, above 1 flatter; 0 is greedy
  std::int64_t top_k = 0;  // draw among the top_k likeliest tokens (ties with the last kept); 0 for all
};

namespace detail {

// The token `how` draws from `logits`, where `uniform` in [0, 1) is the draw's random number.
[[nodiscard]] inline std::int32_t draw_token(std::span<const double> logits, const sampling& how, double uniform) {
  const auto vocabulary = static_cast<std::int32_t>(logits.size());
  const auto likeliest = std::ranges::max_element(logits);
  if (how.temperature == 0) return static_cast<std::int32_t>(likeliest - logits.begin());
  double kept_from = -std::numeric_limits<double>::infinity();  // the least logit drawn among
  if (how.top_k > 0 && how.top_k < vocabulary) {
    std::vector<double> sorted(logits.begin(), logits.end());
    std::ranges::nth_element(sorted, sorted.begin() + (how.top_k - 1), std::greater<>());
    kept_from = sorted[static_cast<std::size_t>(how.top_k - 1)];
  }
  std::vector<double> weights(logits.size());
  double total = 0;
  for (std::size_t token = 0; token < logits.size(); ++token)
    total += weights[token] =
        logits[token] >= kept_from ? std::exp((logits[token] - *likeliest) / how.temperature) : 0.0;
  // The token whose share of [0, total) holds uniform * total; where rounding runs past the last share,
  // the last token that has one, never one outside the top k.
  double threshold = uniform * total;
  auto drawn = static_cast<std::int32_t>(likeliest - logits.begin());
  for (std::int32_t token = 0; token < vocabulary; ++token) {
    const double weight = weights[static_cast<std::size_t>(token)];
    if (weight == 0) continue;
    drawn = token;
    if ((threshold -= weight) < 0) break;
  }
  return drawn;
}

}  // namespace detail

template <class T, class Family, class Mesh, class Token>
[[nodiscard]] std::vector<Token> sample(gpt<T, Family, Mesh>& model, std::span<const Token> prompt, long count,
                                        std::uint64_t seed, const sampling& how = {}) {
  if (!(how.temperature >= 0 && std::isfinite(how.temperature)) || how.top_k < 0)
    throw argument_error(model.mesh().world().world_rank(), "model::sample",
                         "temperature " + std::to_string(how.temperature) + " and top_k " + std::to_string(how.top_k) +
                             ": the temperature is finite and at least 0, top_k at least 0");
  const nn::no_grad no_backward;  // the forward passes keep nothing for a backward
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
      const Eigen::Matrix<double, 1, Eigen::Dynamic> wide = logits.template cast<double>();
      texts[static_cast<std::size_t>(s)].push_back(
          detail::draw_token({wide.data(), static_cast<std::size_t>(wide.size())}, how, uniform_at(seed, drawn, s)));
    }
  }
  return {texts[0].begin() + static_cast<std::ptrdiff_t>(prompt.size()), texts[0].end()};
}

}  // namespace shardwise::model
