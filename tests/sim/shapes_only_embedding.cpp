// The shapes-only model test's fused embedding (shapes_only_model_test.cpp describes the test), compiled
// apart from the GPT step, which is most of what the test instantiates.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "fused/embedding_data.hpp"
#include "shardwise/fused/embedding_all_to_all.hpp"
#include "shardwise/fused/embedding_bag.hpp"
#include "shardwise/mesh/data_parallel_mesh.hpp"
#include "shardwise/nn/sparse_parameter.hpp"
#include "shardwise/optim/rowwise_adagrad.hpp"
#include "shardwise/optim/sparse_update.hpp"
#include "shardwise/sim/sim_gpu.hpp"
#include "sim/shapes_only_checks.hpp"

namespace {

using namespace shardwise;
using shardwise::testing::expect_same_costs;

// A sparse gradient for each of a rank's tables, and the pointers to them the operator's backward takes.
struct table_gradients {
  explicit table_gradients(const shardwise::testing::rank_inputs& in) {
    for (const auto& table : in.tables) rows.emplace_back(table.rows(), static_cast<int>(table.cols()));
    for (auto& g : rows) pointers.push_back(&g);
  }
  table_gradients(const table_gradients&) = delete;
  table_gradients& operator=(const table_gradients&) = delete;
  [[nodiscard]] std::span<nn::sparse_rows<float>* const> span() const { return pointers; }

  std::vector<nn::sparse_rows<float>> rows;
  std::vector<nn::sparse_rows<float>*> pointers;
};

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

          table_gradients into(in);
          const std::vector<float> output_gradient(static_cast<std::size_t>(op.plan().output_floats(world.rank())),
                                                   0.5F);
          op.fused_backward(std::span<const float>(output_gradient), in.bag_spans, into.span());
          op.baseline_backward(std::span<const float>(output_gradient), in.bag_spans, into.span());
        },
        gpus_per_node);
}

// The operator's memory, counted by hand in both modes: its window (two outputs and their flags, and
// from the first backward two gradient buffers and theirs) and the buffers it keeps across calls, the
// baseline's pooled rows and what it receives, grown to the larger of the forward's and the backward's.
TEST(shapes_only, the_fused_embeddings_window_and_buffers_are_counted_working_memory) {
  for (const int gpus_per_node : {4, 2})
    expect_same_costs(
        4,
        [](sim_gpu::communicator& world) {
          const element_memory& memory = *element_memory::of_this_thread();
          const std::int64_t before = memory.working_bytes_held();
          fused::embedding_options options;
          options.slice_rows = 3;
          fused::embedding_all_to_all op(world, {11, 6, 37}, options);
          const auto& plan = op.plan();
          const int r = world.rank();
          const auto floats = [](std::int64_t n) { return n * static_cast<std::int64_t>(sizeof(float)); };
          // A window's block: its two buffers, rounded up to a cache line, then its flags.
          const auto window = [](std::int64_t buffer_bytes, std::size_t flags) {
            return (2 * buffer_bytes + 63) / 64 * 64 + static_cast<std::int64_t>(flags * sizeof(epoch_flag_word));
          };
          const std::int64_t outputs = window(floats(plan.output_floats(r)), plan.flags_at(r));
          EXPECT_EQ(memory.working_bytes_held() - before, outputs);

          const shardwise::testing::rank_inputs in(op.plan(), world.rank(), 0);
          // The forward's pooled rows: every rank's samples, this rank's tables; received: its samples, every table.
          const std::int64_t pooled = floats(plan.shape().global_batch * plan.width_of(r));
          const std::int64_t received = floats(plan.output_floats(r));
          (void)op.baseline(in.table_spans, in.bag_spans);
          EXPECT_EQ(memory.working_bytes_held() - before, outputs + pooled + received);
          (void)op.fused(in.table_spans, in.bag_spans);  // its staging buffer, slices to the other node, fits
          EXPECT_EQ(memory.working_bytes_held() - before, outputs + pooled + received);

          table_gradients into(in);
          const std::vector<float> output_gradient(static_cast<std::size_t>(plan.output_floats(r)), 0.5F);
          op.fused_backward(std::span<const float>(output_gradient), in.bag_spans, into.span());
          const std::int64_t gradient_window = window(floats(plan.gradient_floats(r)), plan.backward_flags_at(r));
          EXPECT_EQ(memory.working_bytes_held() - before, outputs + gradient_window + pooled + received);
          // The backward's exchange goes the other way: what the forward received is sent, and back.
          op.baseline_backward(std::span<const float>(output_gradient), in.bag_spans, into.span());
          EXPECT_EQ(memory.working_bytes_held() - before, outputs + gradient_window + 2 * std::max(pooled, received));
        },
        gpus_per_node);
}

// The layer around the operator (fused::embedding_bag: a table-wise and a row-wise table, forward and
// backward, then row-wise Adagrad on the tables): with shapes only its output lies in the unstored
// range, and it neither places pooled values into it nor gathers the output gradient's columns for the
// operator; the update clears the gradients it was given.
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
    optim::sparse_update<optim::rowwise_adagrad> update(layer);
    layer.backward(gradient);
    update.step(world, 0.1F);
    layer.for_each_sparse_parameter([](const std::string& name, nn::sparse_parameter<float>& p) {
      EXPECT_TRUE(p.gradient.touched().empty()) << name;
    });
  });
}

// The tables are storage of the rank, as dense parameters are, and so is their optimizer state, by
// hand: four table-wise tables, one a rank (40 x 8, 24 x 8, 16 x 4, 8 x 4 floats), and a row-wise
// 64 x 4 table, 16 rows a rank; row-wise Adagrad keeps one float a row. Counted in full and with shapes
// only, where the values lie in the range that holds no memory.
TEST(shapes_only, embedding_tables_and_their_optimizer_state_are_counted_storage) {
  for (const auto how : {sim_gpu::execution::full, sim_gpu::execution::shapes_only})
    sim_gpu::run(
        4, sim::presets::mi210_nodes(4),
        [](sim_gpu::communicator& world) {
          data_parallel_mesh mesh(world, world.size(), {1});
          using local_mesh = std::remove_cvref_t<decltype(mesh.tensor_parallel())>;
          using layer_type = fused::embedding_bag<float, std::remove_cvref_t<decltype(mesh.data())>, local_mesh>;
          const std::vector<fused::embedding_table> tables = {
              {40, 8}, {24, 8}, {16, 4}, {8, 4}, {64, 4, fused::table_sharding::row_wise}};
          constexpr std::array<std::int64_t, 4> whole_table_rows{40, 24, 16, 8}, whole_table_floats{320, 192, 64, 32};
          const auto r = static_cast<std::size_t>(world.rank());
          const element_memory& memory = *element_memory::of_this_thread();

          const std::int64_t before_layer = memory.bytes_held();
          layer_type layer(mesh.data(), mesh.tensor_parallel(), tables, 8, 7);
          EXPECT_EQ(memory.bytes_held() - before_layer,
                    static_cast<std::int64_t>((whole_table_floats[r] + 16 * 4) * sizeof(float)));
          const std::int64_t before_update = memory.bytes_held();
          const optim::sparse_update<optim::rowwise_adagrad> update(layer);
          EXPECT_EQ(memory.bytes_held() - before_update,
                    static_cast<std::int64_t>((whole_table_rows[r] + 16) * sizeof(float)));

          layer.for_each_sparse_parameter([&](const std::string& name, nn::sparse_parameter<float>& p) {
            const bool unstored =
                p.values().data() == element_memory::unstored_on_this_thread<float>(p.values().size());
            EXPECT_EQ(unstored, !memory.stores_elements()) << name;
          });
        },
        how);
}

// A table gradient's rows are storage of the rank too, taken as rows are first touched: room for 16
// rows at first (each its gradient and its entry in the list of rows touched, an integer), then twice
// as many each time they are full (the rows summed so far carried over), kept through clear() for the
// next batch; and with the first touch, where each of the table's 100 rows lies among them (100
// integers). With shapes only they are counted alike and the rows lie in the range that holds no
// memory.
TEST(shapes_only, a_table_gradients_rows_are_counted_storage) {
  for (const auto how : {sim_gpu::execution::full, sim_gpu::execution::shapes_only})
    sim_gpu::run(
        1, sim::presets::mi210_nodes(1, 1),
        [](sim_gpu::communicator&) {
          const element_memory& memory = *element_memory::of_this_thread();
          constexpr int dimension = 4;
          constexpr auto row_bytes = static_cast<std::int64_t>(dimension * sizeof(float) + sizeof(std::int64_t));
          constexpr auto slot_bytes = static_cast<std::int64_t>(100 * sizeof(std::int64_t));
          const std::int64_t before = memory.bytes_held();
          nn::sparse_rows<float> gradient(100, dimension);
          EXPECT_EQ(memory.bytes_held(), before) << "no row touched, none held";
          const auto touch = [&](std::int64_t index) {
            float* row = gradient.row(index);
            const auto slot = static_cast<std::ptrdiff_t>(gradient.touched().size()) - 1;
            if (const float* unstored = element_memory::unstored_on_this_thread<float>(dimension))
              EXPECT_EQ(row, unstored + slot * dimension) << "row " << index << " holds memory";
            else
              row[0] += static_cast<float>(index);
          };
          for (std::int64_t index = 0; index < 3; ++index) touch(10 * index);
          EXPECT_EQ(memory.bytes_held() - before, slot_bytes + 16 * row_bytes);
          for (std::int64_t index = 0; index < 17; ++index) touch(index + 50);
          EXPECT_EQ(memory.bytes_held() - before, slot_bytes + 32 * row_bytes) << "20 rows touched";
          EXPECT_EQ(memory.high_water() - before, slot_bytes + (16 + 32) * row_bytes)
              << "both while the rows were copied";
          if (memory.stores_elements()) {
            EXPECT_EQ(gradient.find(20)[0], 20.0F) << "a row summed before the rows grew";
            EXPECT_EQ(gradient.values(19)[0], 66.0F) << "the 20th row touched";
          }
          gradient.clear();
          EXPECT_EQ(memory.bytes_held() - before, slot_bytes + 32 * row_bytes) << "kept for the next batch";
          touch(20);
          if (memory.stores_elements()) {
            EXPECT_EQ(gradient.values(0)[0], 20.0F) << "a row is zeros when first touched";
          }
        },
        how);
}

}  // namespace
