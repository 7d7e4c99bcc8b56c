// The GPT test (gpt_test.cpp) in float: every family on every split of the world equals the model on
// one rank to 1e-4, relative; and a configuration whose width does not split into its heads is refused.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "model/gpt_checks.hpp"
#include "shardwise/comm/threads.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/model/gpt.hpp"
#include "support/backends.hpp"

namespace {

using namespace shardwise;
using namespace shardwise::testing;

TYPED_TEST(gpt_test, loss_and_gradients_equal_one_rank_in_float) {
  TypeParam::run([](communicator auto& world) { check_every_mesh<float>(world, serial_gpt<float>(), 1e-4); },
                 {1, 4, 8});
}

TEST(gpt_config, errors_name_the_sizes) {
  threads::run(1, [](communicator auto& world) {
    process_mesh mesh(world, {1});
    using model_type = model::gpt<float, nn::tensor_parallel_1d<>, decltype(mesh)>;
    auto bad = gpt_test_config;
    bad.heads = 3;
    try {
      model_type m(mesh, bad);
      FAIL() << "16 wide in 3 heads was accepted";
    } catch (const argument_error& e) {
      EXPECT_NE(std::string(e.what()).find("does not split into 3 heads"), std::string::npos) << e.what();
    }
  });
}

}  // namespace
