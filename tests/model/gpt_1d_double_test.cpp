// The GPT test's 1-D family in double (gpt_test.cpp): its comparison with the model on one rank
// (gpt_checks.hpp), compiled here with the tests that run the same model: a position sees no later token,
// and sampling draws what the model on one rank draws.
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "model/gpt_checks.hpp"
#include "shardwise/comm/threads.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/model/gpt.hpp"
#include "shardwise/model/sample.hpp"
#include "shardwise/tensor/distribute.hpp"
#include "support/backends.hpp"

namespace shardwise::testing {

template void expect_model_equals<double, gpt_family_1d>(family_mesh<gpt_family_1d>&, backend::communicator_type&,
                                                         std::int64_t, std::int64_t, const gpt_results<double>&, double,
                                                         nn::recomputation);

}  // namespace shardwise::testing

namespace {

using namespace shardwise;
using namespace shardwise::testing;

// Causality: a position's hidden state depends on the tokens up to it only. Changing the last token of
// every sample leaves every other position's state as it was.
TYPED_TEST(gpt_test, a_position_sees_no_later_token) {
  TypeParam::run(
      [](communicator auto& world) {
        process_mesh mesh(world, {world.size()});
        model::gpt<double, nn::tensor_parallel_1d<padded>, decltype(mesh)> gpt(mesh, gpt_test_config);
        std::vector<std::int32_t> tokens;
        for (std::int64_t i = 0; i < 2 * gpt_test_config.context; ++i) tokens.push_back(token_at(i));
        const auto before = all_gather(gpt.hidden_states(tokens));
        for (std::int64_t s = 0; s < 2; ++s) {
          auto& last = tokens[static_cast<std::size_t>((s + 1) * gpt_test_config.context - 1)];
          last = (last + 5) % gpt_test_config.vocabulary;
        }
        const auto after = all_gather(gpt.hidden_states(tokens));
        for (std::int64_t row = 0; row < before.rows(); ++row) {
          const bool last = row % gpt_test_config.context == gpt_test_config.context - 1;
          if (last) EXPECT_NE(before.row(row), after.row(row)) << "row " << row;
          else
            EXPECT_EQ(before.row(row), after.row(row)) << "row " << row << " saw a later token";
        }
      },
      {1, 2});
}

// Sampling on a tensor-parallel mesh draws what the model on one rank draws, at every temperature and
// top_k; greedy sampling takes the one-rank model's likeliest token after the text so far.
TYPED_TEST(gpt_test, sampling_equals_the_model_on_one_rank) {
  const std::vector<std::int32_t> prompt{4, 1, 7};
  const std::vector<model::sampling> ways{{}, {.temperature = 0}, {.temperature = 0.6, .top_k = 3}, {.top_k = 1}};
  std::vector<std::vector<std::int32_t>> expected;
  std::vector<std::int32_t> greedy_expected;
  threads::run(1, [&](communicator auto& world) {
    process_mesh mesh(world, {1});
    model::gpt<double, nn::tensor_parallel_1d<padded>, decltype(mesh)> gpt(mesh, gpt_test_config);
    for (const auto& how : ways)
      expected.push_back(model::sample(gpt, std::span<const std::int32_t>(prompt), 6, 5, how));
    // Greedy by hand: the likeliest next token of the logits of the text so far, each time.
    std::vector<std::int32_t> text = prompt;
    const auto table = all_gather(gpt.embedding().token_table().value);
    for (int drawn = 0; drawn < 6; ++drawn) {
      std::vector<std::int32_t> window(static_cast<std::size_t>(gpt_test_config.context), 0);
      const auto known = std::min<std::size_t>(text.size(), window.size());
      std::copy(text.end() - static_cast<std::ptrdiff_t>(known), text.end(), window.begin());
      const Eigen::RowVectorXd logits =
          all_gather(gpt.hidden_states(window)).row(static_cast<Eigen::Index>(known) - 1) * table.transpose();
      Eigen::Index likeliest = 0;
      logits.maxCoeff(&likeliest);
      text.push_back(static_cast<std::int32_t>(likeliest));
    }
    greedy_expected.assign(text.begin() + static_cast<std::ptrdiff_t>(prompt.size()), text.end());
  });
  EXPECT_EQ(expected[1], greedy_expected);
  EXPECT_EQ(expected[3], expected[1]) << "top_k 1 draws the likeliest token";
  EXPECT_NE(expected[0], expected[1]) << "temperature 1 drew the greedy text: the test cannot tell them apart";
  TypeParam::run(
      [&](communicator auto& world) {
        process_mesh mesh(world, {world.size()});
        model::gpt<double, nn::tensor_parallel_1d<padded>, decltype(mesh)> gpt(mesh, gpt_test_config);
        for (std::size_t w = 0; w < ways.size(); ++w)
          EXPECT_EQ(model::sample(gpt, std::span<const std::int32_t>(prompt), 6, 5, ways[w]), expected[w])
              << "temperature " << ways[w].temperature << ", top_k " << ways[w].top_k;
        EXPECT_THROW((void)model::sample(gpt, std::span<const std::int32_t>(prompt), 1, 5, {.temperature = -1}),
                     argument_error);
      },
      {1, 2, 4});
}

}  // namespace
