// The shapes-only model test's fused embedding (shapes_only_model_test.cpp describes the test), compiled
// apart from the GPT step, which is most of what the test instantiates.
#include <gtest/gtest.h>

#include "fused/embedding_data.hpp"
#include "shardwise/fused/embedding_all_to_all.hpp"
#include "shardwise/sim/sim_gpu.hpp"
#include "sim/shapes_only_checks.hpp"

namespace {

using namespace shardwise;
using shardwise::testing::expect_same_costs;

// The fused operator and its unfused baseline, uneven bags, on four ranks in one node.
TEST(shapes_only, the_fused_embedding_costs_what_its_full_run_costs) {
  expect_same_costs(4, [](sim_gpu::communicator& world) {
    fused::embedding_options options;
    options.slice_rows = 3;
    fused::embedding_all_to_all op(world, {11, 8, 37}, options);
    const shardwise::testing::rank_inputs in(op.plan(), world.rank(), 0);
    (void)op.fused(in.table_spans, in.bag_spans);
    (void)op.baseline(in.table_spans, in.bag_spans);
  });
}

}  // namespace
