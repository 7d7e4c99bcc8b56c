// The shapes-only model test's fused embedding (shapes_only_model_test.cpp describes the test), compiled
// apart from the GPT step, which is most of what the test instantiates.
#include <gtest/gtest.h>

#include "fused/embedding_data.hpp"
#include "shardwise/fused/embedding_all_to_all.hpp"
#include "shardwise/nn/sparse_parameter.hpp"
#include "shardwise/sim/sim_gpu.hpp"
#include "sim/shapes_only_checks.hpp"

namespace {

using namespace shardwise;
using shardwise::testing::expect_same_costs;

// The fused operator and its unfused baseline, forward and backward, uneven bags, on four ranks in one
// node (the slices stored into the peers) and in two nodes (put to the other node): with shapes only,
// neither pools nor moves a value, and both outputs lie in the range that holds no memory.
TEST(shapes_only, the_fused_embedding_costs_what_its_full_run_costs) {
  for (const int gpus_per_node : {4, 2})
    expect_same_costs(
        4,
        [](sim_gpu::communicator& world) {
          fused::embedding_options options;
          options.slice_rows = 3;
          fused::embedding_all_to_all op(world, {11, 8, 37}, options);
          const shardwise::testing::rank_inputs in(op.plan(), world.rank(), 0);
          const auto fused = op.fused(in.table_spans, in.bag_spans);
          const auto baseline = op.baseline(in.table_spans, in.bag_spans);
          const auto unstored = [](std::span<const float> out) {
            return out.data() == element_memory::unstored_on_this_thread<float>(out.size());
          };
          EXPECT_EQ(unstored(fused), !element_memory::stored_on_this_thread());
          EXPECT_EQ(unstored(baseline), !element_memory::stored_on_this_thread());

          std::vector<nn::sparse_rows<float>> gradients;
          for (const auto& table : in.tables) gradients.emplace_back(table.rows(), static_cast<int>(table.cols()));
          std::vector<nn::sparse_rows<float>*> into;
          for (auto& g : gradients) into.push_back(&g);
          const std::vector<float> output_gradient(static_cast<std::size_t>(op.plan().output_floats(world.rank())),
                                                   0.5F);
          op.fused_backward(std::span<const float>(output_gradient), in.bag_spans,
                            std::span<nn::sparse_rows<float>* const>(into));
          op.baseline_backward(std::span<const float>(output_gradient), in.bag_spans,
                               std::span<nn::sparse_rows<float>* const>(into));
        },
        gpus_per_node);
}

}  // namespace
