// How sample() draws a token from the logits (model::detail::draw_token), against the distribution it
// should draw from, computed here: softmax(logits / temperature) over the top_k likeliest tokens. A draw
// whose random number falls inside a token's share of [0, 1) must take that token. It needs no backend,
// so it compiles and runs once; the sampling of a distributed model is gpt_1d_double_test.cpp's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "shardwise/model/sample.hpp"

namespace {

using namespace shardwise;

const std::vector<double> logits{0.5, 2.0, -1.0, 2.0, 1.25, -3.0};  // tokens 1 and 3 tie as likeliest

// Each token's share of [0, 1): exp(logit / temperature) over the tokens whose logit is at least the
// `top_k`-th largest, normalised.
std::vector<double> expected_shares(double temperature, double least_kept) {
  std::vector<double> shares;
  double total = 0;
  for (const double logit : logits)
    total += shares.emplace_back(logit >= least_kept ? std::exp(logit / temperature) : 0);
  for (double& share : shares) share /= total;
  return shares;
}

// A draw anywhere inside a token's share, from near its start to near its end, takes that token; one with
// no share is never drawn.
void expect_draws_follow(const model::sampling& how, const std::vector<double>& shares) {
  double below = 0;
  for (std::size_t token = 0; token < shares.size(); ++token) {
    for (const double inside : {0.01, 0.5, 0.99})
      if (shares[token] > 0) {
        EXPECT_EQ(model::detail::draw_token(logits, how, below + inside * shares[token]),
                  static_cast<std::int32_t>(token))
            << "temperature " << how.temperature << ", top_k " << how.top_k << ", " << inside << " into the share";
      }
    below += shares[token];
  }
  for (double uniform = 0; uniform < 1; uniform += 1.0 / 64)
    EXPECT_GT(shares[static_cast<std::size_t>(model::detail::draw_token(logits, how, uniform))], 0)
        << "drew a token outside the top " << how.top_k << " at " << uniform;
}

TEST(sampling, draws_from_the_softmax_of_the_logits_over_the_temperature) {
  for (const double temperature : {1.0, 0.5, 2.0})
    expect_draws_follow({.temperature = temperature}, expected_shares(temperature, -INFINITY));
}

TEST(sampling, top_k_draws_among_the_likeliest_only) {
  expect_draws_follow({.temperature = 0.8, .top_k = 3}, expected_shares(0.8, 1.25));
  expect_draws_follow({.temperature = 1, .top_k = 2}, expected_shares(1, 2.0));
  // The tie at the k-th logit keeps both tokens, as nanoGPT's mask of the logits below it does.
  expect_draws_follow({.temperature = 1, .top_k = 1}, expected_shares(1, 2.0));
  expect_draws_follow({.temperature = 1, .top_k = 6}, expected_shares(1, -INFINITY));
  expect_draws_follow({.temperature = 1, .top_k = 60}, expected_shares(1, -INFINITY));
}

// A random number at the end of [0, 1), or at 1 where rounding takes it, still draws a token that has a
// share: here the last of the top 2, not the vocabulary's last token.
TEST(sampling, the_end_of_the_range_draws_a_kept_token) {
  for (const double uniform : {std::nextafter(1.0, 0.0), 1.0}) {
    EXPECT_EQ(model::detail::draw_token(logits, {.temperature = 1, .top_k = 2}, uniform), 3);
    EXPECT_EQ(model::detail::draw_token(logits, {.temperature = 1}, uniform), 5);
  }
}

TEST(sampling, temperature_zero_takes_the_likeliest_token) {
  for (const double uniform : {0.0, 0.5, 0.999}) {
    EXPECT_EQ(model::detail::draw_token(logits, {.temperature = 0}, uniform), 1) << "the first of the tied likeliest";
    EXPECT_EQ(model::detail::draw_token(logits, {.temperature = 0, .top_k = 4}, uniform), 1);
  }
}

}  // namespace
