// The shapes-only test's transformer block (shapes_only_test.cpp describes the test), compiled on its own:
// the 3-D family's block is most of what the test instantiates.
#include <gtest/gtest.h>

#include "shardwise/layout/layout.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/nn/family.hpp"
#include "shardwise/nn/transformer_block.hpp"
#include "shardwise/sim/sim_gpu.hpp"
#include "shardwise/tensor/dtensor.hpp"
#include "sim/shapes_only_checks.hpp"

namespace {

using namespace shardwise;
using shardwise::testing::expect_same_costs;

// A block of the 3-D family on a 2x2x2 cube, forward and backward.
TEST(shapes_only, a_transformer_block_costs_what_its_full_run_costs) {
  expect_same_costs(8, [](sim_gpu::communicator& world) {
    process_mesh mesh(world, {2, 2, 2});
    using family = nn::tensor_parallel_3d<>;
    const nn::block_options options{.hidden = 32, .heads = 4, .sequence = 8, .expansion = 4, .causal = true};
    nn::transformer_block<float, family, decltype(mesh)> block(mesh, options, 7);
    const matrix_extents extents{4 * options.sequence, options.hidden};
    const auto x = from_function<family::input>(mesh, extents, [](auto i, auto j) { return float(i - j) / 64; });
    const auto dy = from_function<family::input>(mesh, extents, [](auto i, auto j) { return float(i + j) / 64; });
    const auto y = block.forward(x);
    (void)block.backward(dy);
  });
}

}  // namespace
