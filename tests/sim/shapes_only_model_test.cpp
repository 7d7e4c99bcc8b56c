// Shapes-only execution of whole programs (sim_gpu::execution::shapes_only): a GPT training step over
// data replicas and the fused embedding-bag + all-to-all cost, on every rank, what their full runs
// cost (time to 1e-9 relative, traffic, storage high-water mark). The fused embedding compiles in a
// source of its own (shapes_only_embedding.cpp).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "shardwise/mesh/data_parallel_mesh.hpp"
#include "shardwise/model/gpt.hpp"
#include "shardwise/optim/adamw.hpp"
#include "shardwise/optim/sharded.hpp"
#include "sim/shapes_only_checks.hpp"

namespace {

using namespace shardwise;
using shardwise::testing::expect_same_costs;

// Two replicas of a 1-D GPT on two ranks each: forward, backward and a sharded AdamW step, twice.
TEST(shapes_only, a_gpt_training_step_costs_what_its_full_run_costs) {
  expect_same_costs(4, [](sim_gpu::communicator& world) {
    data_parallel_mesh mesh(world, 2, coordinates<1>{2});
    const model::gpt_config config{
        .vocabulary = 13, .context = 8, .hidden = 16, .heads = 4, .layers = 2, .expansion = 2, .seed = 3};
    using tensor_parallel_mesh = std::remove_cvref_t<decltype(mesh.tensor_parallel())>;
    model::gpt<float, nn::tensor_parallel_1d<padded>, tensor_parallel_mesh> gpt(mesh.tensor_parallel(), config);
    optim::sharded_update<optim::adamw> update(gpt, mesh.data());
    std::vector<std::int32_t> tokens, targets;
    for (std::int32_t i = 0; i < 2 * config.context; ++i) {
      tokens.push_back((i * 7 + mesh.replica()) % 13);
      targets.push_back((i * 5 + 1) % 13);
    }
    for (int step = 0; step < 2; ++step) {
      (void)gpt.forward(tokens, targets);
      gpt.backward();
      (void)update.step(mesh.data(), mesh.tensor_parallel().world(), {1e-3f, 1.0f});
    }
  });
}

}  // namespace
