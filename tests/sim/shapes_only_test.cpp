// Shapes-only execution of simulated GPUs (sim_gpu::execution::shapes_only): the same library program
// run with its values and without them gives the same virtual time on every rank (to 1e-9 relative),
// the same traffic and the same high-water mark of element storage; and that mark is the storage the
// program allocated, counted by hand. The transformer block compiles in a source of its own
// (shapes_only_block.cpp); the gpt step and the fused embedding are in shapes_only_model_test.cpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "shardwise/core/shared_buffer.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/ops/matmul.hpp"
#include "shardwise/optim/adam.hpp"
#include "shardwise/optim/sharded.hpp"
#include "shardwise/sim/presets.hpp"
#include "shardwise/sim/sim_gpu.hpp"
#include "shardwise/tensor/distribute.hpp"
#include "sim/shapes_only_checks.hpp"

namespace {

using namespace shardwise;
using shardwise::testing::expect_same_costs;

// Adam's sharded update over four replicas, two steps, with the gradient norm summed over a group.
TEST(shapes_only, a_sharded_update_costs_what_its_full_run_costs) {
  expect_same_costs(4, [](sim_gpu::communicator& world) {
    const std::vector<optim::parameter_shape> shapes{{96, 40}, {1, 40}, {40, 17}};
    optim::sharded_update<optim::adam> update(world, shapes);
    for (std::size_t t = 0; t < shapes.size(); ++t)
      for (float& g : update.gradients(t)) g = 0.25f;
    for (int step = 0; step < 2; ++step) (void)update.step(world, world, {1e-3f, 1.0f});
  });
}

// Values on a rank that stores none have no memory of their own; integers do. Rank 0 runs on the
// calling thread, so the products' buffers it keeps from a shapes-only run are there for a full run
// that follows, which must not reuse them: its product is the serial one. A fresh thread stands for a
// program whose first run is shapes-only (this one's thread has run products before).
TEST(shapes_only, values_take_no_memory_and_a_later_full_run_computes_the_serial_product) {
  using matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const auto a_of = [](auto i, auto j) { return float(i * 6 + j) / 8; };
  const auto b_of = [](auto i, auto j) { return float(i - 2 * j) / 4; };
  matrix a_whole(8, 6), b_whole(6, 4);
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 6; ++j) a_whole(i, j) = a_of(i, j);
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 4; ++j) b_whole(i, j) = b_of(i, j);
  const matrix expected = a_whole * b_whole;
  std::jthread program([&] {
    for (const auto how : {sim_gpu::execution::shapes_only, sim_gpu::execution::full}) {
      const bool stored = how == sim_gpu::execution::full;
      sim_gpu::run(
          4, sim::presets::mi210_nodes(4),
          [&](sim_gpu::communicator& world) {
            EXPECT_EQ(shared_buffer<float>::zeros(16).stored(), stored);
            EXPECT_TRUE(shared_buffer<std::int32_t>::zeros(16).stored());
            process_mesh mesh(world, {2, 2});
            const auto a = from_function<block_2d<>>(mesh, {8, 6}, a_of);
            const auto b = from_function<block_2d<>>(mesh, {6, 4}, b_of);
            const matrix c = gather(matmul(a, b));
            if (stored && world.rank() == 0) {
              EXPECT_TRUE(c.isApprox(expected, 1e-5f)) << c << "\nagainst\n" << expected;
            }
          },
          how);
    }
  });
}

// What a program allocates, by hand: on 4 ranks, a 16x12 tensor cut by columns holds 16x3 floats a
// rank (192 bytes), its copy as many; a sharded Adam over 4 replicas of one 8x16 parameter holds its
// weights and gradients whole (128 floats each) and two moments of its quarter (2 x 32 floats).
// The copy is gone before the update is made, so the mark is 192 + 192, then 192 + 512 + 512 + 256.
TEST(shapes_only, the_memory_high_water_mark_is_the_storage_allocated) {
  constexpr std::int64_t tensor = 16 * 3 * sizeof(float);
  constexpr std::int64_t update = (128 + 128 + 2 * 32) * sizeof(float);
  for (const auto how : {sim_gpu::execution::full, sim_gpu::execution::shapes_only}) {
    const auto report = sim_gpu::run(
        4, sim::presets::mi210_nodes(4),
        [](sim_gpu::communicator& world) {
          process_mesh mesh(world, {4});
          const dtensor<float, row_1d<>, decltype(mesh)> a(mesh, {16, 12});
          {
            const auto copy = a;
          }
          const optim::sharded_update<optim::adam> sharded(world, {{8, 16}});
        },
        how);
    for (const std::int64_t mark : report.memory_high_water) EXPECT_EQ(mark, tensor + update);
  }
}

}  // namespace
