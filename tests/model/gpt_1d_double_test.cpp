// The GPT test's 1-D family in double (gpt_test.cpp): its comparison with the model on one rank
// (gpt_checks.hpp), compiled here with the test that runs the same model: a position sees no later token.
#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <vector>

#include "model/gpt_checks.hpp"
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

}  // namespace
