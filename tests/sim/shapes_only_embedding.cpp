// The shapes-only model test's fused embedding (shapes_only_model_test.cpp describes the test), compiled
// apart from the GPT step, which is most of what the test instantiates.
#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "fused/embedding_data.hpp"
#include "shardwise/fused/embedding_all_to_all.hpp"
#include "shardwise/fused/embedding_bag.hpp"
#include "shardwise/mesh/data_parallel_mesh.hpp"
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

// The layer around the operator (fused::embedding_bag: a table-wise and a row-wise table, forward and
// backward): with shapes only its output lies in the unstored range, and it neither places pooled
// values into it nor gathers the output gradient's columns for the operator.
TEST(shapes_only, the_embedding_bag_layer_costs_what_its_full_run_costs) {
  expect_same_costs(4, [](sim_gpu::communicator& world) {
    data_parallel_mesh mesh(world, world.size(), {1});
    using local_mesh = std::remove_cvref_t<decltype(mesh.tensor_parallel())>;
    constexpr std::int64_t batch = 12;
    const std::vector<fused::embedding_table> tables = {{40, 8}, {64, 4, fused::table_sharding::row_wise}, {16, 8}};
    fused::embedding_bag<float, std::remove_cvref_t<decltype(mesh.data())>, local_mesh> layer(
        mesh.data(), mesh.tensor_parallel(), tables, batch, 7);
    std::vector<std::vector<std::int64_t>> offsets, indices;
    std::vector<fused::embedding_bags> bags;
    for (const int t : layer.input_tables()) {
      auto& o = offsets.emplace_back(1, 0);
      auto& i = indices.emplace_back();
      for (std::int64_t b = 0; b < batch; ++b) {
        for (std::int64_t k = 0; k < b % 4; ++k)
          i.push_back((b * 7 + k * 5) % tables[static_cast<std::size_t>(t)].rows);
        o.push_back(static_cast<std::int64_t>(i.size()));
      }
    }
    for (std::size_t k = 0; k < offsets.size(); ++k) bags.push_back({offsets[k], indices[k]});
    const auto out = layer.forward(bags);
    const bool stored = element_memory::stored_on_this_thread();
    EXPECT_EQ(out.data().data() == element_memory::unstored_on_this_thread<float>(out.data().size()), !stored);
    decltype(layer)::output_type gradient(mesh.tensor_parallel(), out.extents());
    if (stored) std::ranges::fill(gradient.data(), 0.5F);
    layer.backward(gradient);
  });
}

}  // namespace
