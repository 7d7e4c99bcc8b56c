// The GPT test's 1-D family in float (gpt_test.cpp): its comparison with the model on one rank
// (gpt_checks.hpp), compiled here with the test that runs the same model: sampling is the same on every
// rank.
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

template void expect_model_equals<float, gpt_family_1d>(family_mesh<gpt_family_1d>&, backend::communicator_type&,
                                                        std::int64_t, std::int64_t, const gpt_results<float>&, double,
                                                        nn::recomputation);

}  // namespace shardwise::testing

namespace {

using namespace shardwise;
using namespace shardwise::testing;

// Sampling is collective and the same on every rank of the mesh; a different seed draws other text.
TYPED_TEST(gpt_test, sampling_gives_the_same_tokens_on_every_rank) {
  TypeParam::run(
      [](communicator auto& world) {
        process_mesh mesh(world, {world.size()});
        model::gpt<float, nn::tensor_parallel_1d<padded>, decltype(mesh)> gpt(mesh, gpt_test_config);
        const std::vector<std::int32_t> prompt{1, 2, 3};
        const auto text = model::sample(gpt, std::span<const std::int32_t>(prompt), 6, 11);
        ASSERT_EQ(text.size(), 6u);
        std::vector<std::int32_t> first = text;
        world.broadcast(std::span<std::int32_t>(first), 0);
        EXPECT_EQ(text, first);
        for (const auto token : text) EXPECT_TRUE(token >= 0 && token < gpt_test_config.vocabulary);
        EXPECT_NE(model::sample(gpt, std::span<const std::int32_t>(prompt), 6, 12), text);
      },
      {1, 2, 4});
}

}  // namespace
