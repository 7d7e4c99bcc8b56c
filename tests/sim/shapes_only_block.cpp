// The shapes-only test's transformer blocks (shapes_only_test.cpp describes the test), compiled on their
// own: the 3-D family's block is most of what the test instantiates.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "shardwise/core/element_memory.hpp"
#include "shardwise/core/error.hpp"
#include "shardwise/layout/layout.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/nn/family.hpp"
#include "shardwise/nn/recomputation.hpp"
#include "shardwise/nn/transformer_block.hpp"
#include "shardwise/sim/sim_gpu.hpp"
#include "shardwise/tensor/dtensor.hpp"
#include "sim/shapes_only_checks.hpp"

namespace {

using namespace shardwise;
using shardwise::testing::expect_same_costs;
using shardwise::testing::on_two_gpus_in_both_modes;

// A block of the 3-D family on a 2x2x2 cube, forward and backward, keeping its activations, recomputing
// attention's probabilities and recomputing all of them.
TEST(shapes_only, a_transformer_block_costs_what_its_full_run_costs) {
  for (const auto recompute : {nn::recomputation::none, nn::recomputation::attention, nn::recomputation::block}) {
    SCOPED_TRACE("recomputing " + std::string(nn::name_of(recompute)));
    expect_same_costs(8, [&](sim_gpu::communicator& world) {
      process_mesh mesh(world, {2, 2, 2});
      using family = nn::tensor_parallel_3d<>;
      const nn::block_options options{
          .hidden = 32, .heads = 4, .sequence = 8, .expansion = 4, .causal = true, .recompute = recompute};
      nn::transformer_block<float, family, decltype(mesh)> block(mesh, options, 7);
      const matrix_extents extents{4 * options.sequence, options.hidden};
      const auto x = from_function<family::input>(mesh, extents, [](auto i, auto j) { return float(i - j) / 64; });
      const auto dy = from_function<family::input>(mesh, extents, [](auto i, auto j) { return float(i + j) / 64; });
      const auto y = block.forward(x);
      (void)block.backward(dy);
    });
  }
}

// What a block keeps between its forward and its backward, counted on 2 simulated GPUs in both modes:
// recomputing attention, all it keeps otherwise but the probabilities (2 samples x 1 head a rank of
// the 1-D family, 4 x 4 each: 128 bytes); recomputing the block, a copy of its input alone (2 samples of
// 4 positions, width 4, whole on each rank: 128 bytes). Its backward gives back all it kept, leaving y
// and dx. A second backward has nothing kept.
TEST(shapes_only, what_a_block_keeps_for_its_backward) {
  on_two_gpus_in_both_modes([](sim_gpu::communicator& world, const element_memory& memory) {
    process_mesh mesh(world, {2});
    using family = nn::tensor_parallel_1d<>;
    constexpr std::int64_t whole = 8 * 4 * sizeof(float);
    constexpr std::int64_t probabilities = 2 * 4 * 4 * sizeof(float);
    std::int64_t kept[3] = {};
    for (const auto recompute : {nn::recomputation::none, nn::recomputation::attention, nn::recomputation::block}) {
      const nn::block_options options{
          .hidden = 4, .heads = 2, .sequence = 4, .expansion = 2, .causal = true, .recompute = recompute};
      nn::transformer_block<float, family, decltype(mesh)> block(mesh, options, 7);
      const dtensor<float, family::input, decltype(mesh)> x(mesh, {8, 4});
      const std::int64_t before = memory.bytes_held();
      const auto y = block.forward(x);
      kept[static_cast<int>(recompute)] = memory.bytes_held() - before - whole;
      const auto dx = block.backward(y);
      EXPECT_EQ(memory.bytes_held() - before, 2 * whole) << "y and dx alone";
      EXPECT_THROW((void)block.backward(y), argument_error) << "a second backward has nothing kept";
    }
    EXPECT_EQ(kept[1], kept[0] - probabilities) << "recomputing attention: all but the probabilities";
    EXPECT_EQ(kept[2], whole) << "recomputing the block: a copy of the input";
    EXPECT_LT(kept[2], kept[1]) << "the activations kept otherwise";
  });
}

// Sequence parallelism cuts by tokens what a 1-D block keeps whole: the two layer norms' normalised
// inputs and the inputs of attention and the MLP, 4h floats a token, become 4h/T. On 2 GPUs, 8 tokens of
// width 4: 4 * 4 * 8 / 2 floats, 256 bytes, fewer; the rest (queries, keys, values, probabilities, the
// MLP's hidden activations) is cut by heads in both. Its backward gives back all it kept.
TEST(shapes_only, a_sequence_parallel_block_keeps_its_activations_cut_by_tokens) {
  on_two_gpus_in_both_modes([](sim_gpu::communicator& world, const element_memory& memory) {
    process_mesh mesh(world, {2});
    const nn::block_options options{.hidden = 4, .heads = 2, .sequence = 4, .expansion = 2, .causal = true};
    const auto kept_by = [&]<class Family>() {
      nn::transformer_block<float, Family, decltype(mesh)> block(mesh, options, 7);
      const dtensor<float, typename Family::input, decltype(mesh)> x(mesh, {8, 4});
      const std::int64_t one = static_cast<std::int64_t>(x.data().size() * sizeof(float));  // x, y, dx: each
      const std::int64_t before = memory.bytes_held();
      const auto y = block.forward(x);
      const std::int64_t kept = memory.bytes_held() - before - one;
      const auto dx = block.backward(y);
      EXPECT_EQ(memory.bytes_held() - before, 2 * one) << "y and dx alone";
      return kept;
    };
    const std::int64_t whole = kept_by.template operator()<nn::tensor_parallel_1d<>>();
    const std::int64_t cut = kept_by.template operator()<nn::sequence_parallel_1d<>>();
    EXPECT_EQ(whole - cut, 4 * 4 * 8 / 2 * static_cast<std::int64_t>(sizeof(float)));
  });
}

}  // namespace
