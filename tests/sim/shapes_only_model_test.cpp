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

// With the communicator on a stream of its own, the gradients' reduction started bucket by bucket
// during the backward pass (gradients_ready) runs beside the backward's kernels: two replicas of a GPT
// on two MI210s joined by InfiniBand, a bucket a block, step times in virtual time.
TEST(shapes_only, gradients_reduced_during_the_backward_pass_hide_behind_it) {
  const model::gpt_config config{
      .vocabulary = 512, .context = 128, .hidden = 256, .heads = 4, .layers = 4, .expansion = 4, .seed = 3};
  const auto step_time = [&](bool during_backward) {
    double seconds = 0;
    sim_gpu::run(
        2, sim::presets::mi210_nodes(2, 1),
        [&](sim_gpu::communicator& world) {
          world.use_stream(world.device().create_stream("communication"));
          data_parallel_mesh mesh(world, 2, coordinates<1>{1});
          using tensor_parallel_mesh = std::remove_cvref_t<decltype(mesh.tensor_parallel())>;
          model::gpt<float, nn::tensor_parallel_1d<>, tensor_parallel_mesh> gpt(mesh.tensor_parallel(), config);
          const std::size_t block = static_cast<std::size_t>(12 * config.hidden * config.hidden);
          optim::sharded_update<optim::adamw> update(gpt, mesh.data(), {}, {block});
          std::vector<std::int32_t> tokens(static_cast<std::size_t>(4 * config.context));
          for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int32_t>(i * 7 % 512);
          const double start = world.synchronized_now();
          (void)gpt.forward(tokens, tokens);
          if (during_backward) {
            gpt.backward(
                1.0f, [&](std::size_t first, std::size_t count) { update.gradients_ready(mesh.data(), first, count); });
          } else {
            gpt.backward();
          }
          (void)update.step(mesh.data(), mesh.tensor_parallel().world(), {1e-3f, 1.0f});
          const double end = world.synchronized_now();
          if (world.rank() == 0) seconds = end - start;
        },
        sim_gpu::execution::shapes_only);
    return seconds;
  };
  const double after = step_time(false), during = step_time(true);
  RecordProperty("step_after_backward_us", std::to_string(after * 1e6));
  RecordProperty("step_during_backward_us", std::to_string(during * 1e6));
  // The reduce-scatter of the 13 MB of gradients (6.6 MB each way at 20 GB/s) is about a tenth of the step.
  EXPECT_LT(during, 0.95 * after);
}

}  // namespace
