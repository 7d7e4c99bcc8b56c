// Shapes-only execution of simulated GPUs (sim_gpu::execution::shapes_only): the same library program
// run with its values and without them gives the same virtual time on every rank (to 1e-9 relative),
// the same traffic and the same high-water mark of element memory; and that mark is the storage and
// working memory the program allocated, counted by hand. The transformer block compiles in a source of its own
// (shapes_only_block.cpp); the gpt step and the fused embedding are in shapes_only_model_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <new>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "shardwise/core/element_memory.hpp"
#include "shardwise/core/error.hpp"
#include "shardwise/core/kernel.hpp"
#include "shardwise/core/shared_buffer.hpp"
#include "shardwise/layout/padding.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/mesh/data_parallel_mesh.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/nn/family.hpp"
#include "shardwise/nn/no_grad.hpp"
#include "shardwise/nn/parameter.hpp"
#include "shardwise/nn/self_attention.hpp"
#include "shardwise/ops/attention.hpp"
#include "shardwise/ops/matmul.hpp"
#include "shardwise/ops/vocabulary_cross_entropy.hpp"
#include "shardwise/optim/adam.hpp"
#include "shardwise/optim/sharded.hpp"
#include "shardwise/sim/presets.hpp"
#include "shardwise/sim/sim_gpu.hpp"
#include "shardwise/tensor/distribute.hpp"
#include "sim/shapes_only_checks.hpp"

namespace {

using namespace shardwise;
using shardwise::testing::expect_same_costs;
using shardwise::testing::on_two_gpus_in_both_modes;

// Adam's sharded update over four replicas, two steps, with the gradient norm summed over a group.
TEST(shapes_only, a_sharded_update_costs_what_its_full_run_costs) {
  expect_same_costs(4, [](sim_gpu::communicator& world) {
    const std::vector<optim::parameter_shape> shapes{{96, 40}, {1, 40}, {40, 17}};
    optim::sharded_update<optim::adam> update(world, shapes);
    // A loop over elements that is not a kernel asks first: where no values are stored, every rank's
    // gradients lie at the same unstored addresses, and its writes would race with the other ranks'.
    if (element_memory::stored_on_this_thread())
      for (std::size_t t = 0; t < shapes.size(); ++t)
        for (float& g : update.gradients(t)) g = 0.25f;
    for (int step = 0; step < 2; ++step) (void)update.step(world, world, {1e-3f, 1.0f});
  });
}

// A kernel computes values only: where none are stored it does not run, on a device that launches it
// and on a carrier that launches nothing (sparse_update::step(learning_rate), with no device), whose
// computation would otherwise read and write the unstored range.
TEST(shapes_only, a_kernel_runs_its_computation_only_where_values_are_stored_whatever_carries_it) {
  on_two_gpus_in_both_modes([](sim_gpu::communicator& world, const element_memory& memory) {
    struct no_device {
    } host;
    bool on_the_device = false, on_no_device = false;
    run_kernel(world, work{1, 1}, "on the device", [&] { on_the_device = true; });
    run_kernel(host, work{1, 1}, "on no device", [&] { on_no_device = true; });
    EXPECT_EQ(on_the_device, memory.stores_elements());
    EXPECT_EQ(on_no_device, memory.stores_elements());
  });
}

// Values on a rank that stores none have no memory of their own; integers do. Nothing the products
// kept from a shapes-only run (a rank's buffers, core/rank_local.hpp) may serve a full run that
// follows on the same thread: its product is the serial one. A fresh thread stands for a program
// whose first run is shapes-only (this one's thread has run products before).
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

// A product's buffers are working memory, held beside the storage: SUMMA on a 2 x 2 grid, C = A·B of
// 8x6 and 6x4, blocks of 4x3 (A), 3x2 (B) and 4x2 (C) floats. Broadcasting ahead it holds two panels
// of each operand, 2 x (12 + 6) floats (144 bytes); in turn one (72 bytes); and keeps them for the
// next product. The mark is A, B and C (104 bytes) and the panels.
TEST(shapes_only, summa_panels_are_working_memory_in_the_high_water_mark) {
  constexpr std::int64_t operands_and_product = (12 + 6 + 8) * sizeof(float);
  for (const auto when : {summa_broadcasts::ahead, summa_broadcasts::in_turn}) {
    const std::int64_t panels = (when == summa_broadcasts::ahead ? 2 : 1) * (12 + 6) * sizeof(float);
    for (const auto how : {sim_gpu::execution::full, sim_gpu::execution::shapes_only}) {
      const auto report = sim_gpu::run(
          4, sim::presets::mi210_nodes(4),
          [&](sim_gpu::communicator& world) {
            const element_memory& memory = *element_memory::of_this_thread();
            process_mesh mesh(world, {2, 2});
            const dtensor<float, block_2d<>, decltype(mesh)> a(mesh, {8, 6}), b(mesh, {6, 4});
            {
              const auto c = matmul(a, b, matmul_options{.summa = when});
              EXPECT_EQ(memory.bytes_held(), operands_and_product);
            }
            EXPECT_EQ(memory.working_bytes_held(), panels);
          },
          how);
      for (const std::int64_t mark : report.memory_high_water) EXPECT_EQ(mark, operands_and_product + panels);
    }
  }
}

// The activations an operation keeps for its backward pass are storage too, by hand on 2 ranks:
// attention keeps each (sample, head) tile's probabilities, here 2 samples of 4 positions and a head a
// rank, 2 tiles of 4x4 floats (128 bytes), beside its output (8x2 floats, 64 bytes); a second call
// gives the first's back before it takes its own; the backward's three gradients come beside them.
// Attention that recomputes its probabilities in the backward pass keeps none, and works a tile at a
// time in working memory: one tile and 64 bytes more, to start it where a kept tile would (128 bytes).
TEST(shapes_only, attention_keeps_its_probabilities_as_storage) {
  for (const auto how : {attention_probabilities::kept, attention_probabilities::recomputed}) {
    SCOPED_TRACE(how == attention_probabilities::kept ? "kept" : "recomputed");
    on_two_gpus_in_both_modes([how](sim_gpu::communicator& world, const element_memory& memory) {
      process_mesh mesh(world, {2});
      const dtensor<float, row_1d<>, decltype(mesh)> x(mesh, {8, 4});
      const attention_shape shape{4, 2, true};
      attention_saved<float> saved;
      const std::int64_t before = memory.bytes_held();
      ASSERT_EQ(memory.high_water(), before);
      constexpr std::int64_t output = 8 * 2 * sizeof(float);
      const bool kept = how == attention_probabilities::kept;
      const std::int64_t probabilities = kept ? 2 * 4 * 4 * sizeof(float) : 0;
      const std::int64_t tile = kept ? 0 : (4 * 4 + 16) * sizeof(float);
      for (int call = 0; call < 2; ++call) {
        (void)attention_forward(x, x, x, shape, saved, how);
        EXPECT_EQ(memory.bytes_held() - before, probabilities) << "call " << call;
        EXPECT_EQ(memory.high_water() - before, probabilities + output + tile) << "call " << call;
      }
      (void)attention_backward(x, x, x, x, shape, saved);
      EXPECT_EQ(memory.bytes_held() - before, probabilities) << "kept until the next forward";
      EXPECT_EQ(memory.high_water() - before, probabilities + 3 * output + tile);
    });
  }
}

// The vocabulary's cross-entropy keeps the hidden states it is given, whole on each rank (5 tokens of
// width 4, 80 bytes), and the softmax of this rank's 3 of 6 vocabulary rows (60 bytes), computed in
// place of the logits; its backward holds the logits' gradient (60 bytes) and the hidden states'
// (80 bytes, which it returns) beside them.
TEST(shapes_only, the_vocabulary_cross_entropy_keeps_its_inputs_and_softmax_as_storage) {
  on_two_gpus_in_both_modes([](sim_gpu::communicator& world, const element_memory& memory) {
    process_mesh mesh(world, {2});
    using vocabulary = split<rows_over<0>, cols_over<>, ragged>;
    dtensor<float, vocabulary, decltype(mesh)> table(mesh, {6, 4}), table_gradient(mesh, {6, 4});
    const std::vector<std::int32_t> targets{0, 5, 2, 3, 1};
    std::optional<cross_entropy_saved<float, decltype(mesh)>> saved;
    const std::int64_t before = memory.bytes_held();
    ASSERT_EQ(memory.high_water(), before);
    constexpr std::int64_t hidden = 5 * 4 * sizeof(float), softmax = 5 * 3 * sizeof(float);
    (void)vocabulary_cross_entropy(dtensor<float, replicated<>, decltype(mesh)>(mesh, {5, 4}), table, targets, saved);
    EXPECT_EQ(memory.bytes_held() - before, hidden + softmax);
    EXPECT_EQ(memory.high_water() - before, hidden + softmax) << "the softmax in place of the logits";
    const auto hidden_gradient = vocabulary_cross_entropy_backward<replicated<>>(*saved, table, table_gradient, 1.0f);
    EXPECT_EQ(memory.bytes_held() - before, 2 * hidden + softmax);
    EXPECT_EQ(memory.high_water() - before, 2 * hidden + 2 * softmax) << "the logits' gradient beside them";
  });
}

// Self-attention in 1-D on 2 ranks over 2 samples of 4 positions, width 4, a head a rank, run by
// `body(attention, input, memory)` in both modes, and what it keeps counted by hand: its input once for
// the three projections (8x4 floats, 128 bytes, the tensor it was given, not a copy), Q, K and V (8x2
// each, 192), the probabilities (2 tiles of 4x4, 128) and the heads the output projection reads (8x2,
// 64); y is 8x4 too.
constexpr std::int64_t attention_whole = 8 * 4 * sizeof(float);
constexpr std::int64_t attention_kept =
    attention_whole + 3 * 8 * 2 * sizeof(float) + 2 * 4 * 4 * sizeof(float) + 8 * 2 * sizeof(float);
template <class Body>
void with_small_attention(Body body) {
  on_two_gpus_in_both_modes([&](sim_gpu::communicator& world, const element_memory& memory) {
    process_mesh mesh(world, {2});
    using family = nn::tensor_parallel_1d<>;
    nn::self_attention<float, family, decltype(mesh)> attention(mesh, {4, 2, 4, true}, 1);
    body(attention, [&] { return dtensor<float, family::input, decltype(mesh)>(mesh, {8, 4}); }, memory);
  });
}

// A layer keeps what its backward needs from its forward until that backward, which gives it back:
// after the backward nothing, beside y and dx.
TEST(shapes_only, a_layer_keeps_its_activations_until_its_backward) {
  with_small_attention([](auto& attention, auto input, const element_memory& memory) {
    const std::int64_t before = memory.bytes_held();
    {
      const auto y = attention.forward(input());
      EXPECT_EQ(memory.bytes_held() - before, attention_kept + attention_whole) << "kept, and y";
      const auto dx = attention.backward(y);
      EXPECT_EQ(memory.bytes_held() - before, 2 * attention_whole) << "y and dx alone";
      EXPECT_THROW((void)attention.backward(y), argument_error) << "a second backward has nothing kept";
    }
    EXPECT_EQ(memory.bytes_held(), before);
  });
}

// Under nn::no_grad the same layer keeps nothing: after the forward only y is held, and Q, K, V and the
// probabilities are given back before the output projection, so the forward's mark is lower than the
// same forward's when it keeps them. A backward then has nothing to pair with, and a forward after the
// guard keeps again.
TEST(shapes_only, a_layer_under_no_grad_keeps_nothing) {
  with_small_attention([](auto& attention, auto input, const element_memory& memory) {
    const std::int64_t before = memory.bytes_held();
    {
      const nn::no_grad evaluating;
      EXPECT_FALSE(nn::no_grad::keeps_for_backward());
      const auto y = attention.forward(input());
      EXPECT_EQ(memory.bytes_held() - before, attention_whole) << "y alone";
      EXPECT_THROW((void)attention.backward(y), argument_error) << "nothing kept under no_grad";
    }
    const std::int64_t evaluating_mark = memory.high_water() - before;
    EXPECT_TRUE(nn::no_grad::keeps_for_backward());
    const auto y = attention.forward(input());
    EXPECT_EQ(memory.bytes_held() - before, attention_kept + attention_whole) << "kept again";
    EXPECT_LT(evaluating_mark, memory.high_water() - before);
  });
}

// A model of two parameters, whole on each rank of its tensor-parallel mesh.
template <class Mesh>
struct two_parameters {
  nn::parameter<float, row_1d<>, Mesh> weight, bias;
  explicit two_parameters(Mesh& mesh) : weight(mesh, {8, 16}, 0.5f), bias(mesh, {1, 16}, 1.0f) {}
  template <class F>
  void for_each_parameter(F&& f) {
    f("weight", weight);
    f("bias", bias);
  }
};

// An update built from a model takes over its parameters' storage without holding it twice. By hand,
// on 4 replicas: the model's 144 weights and 144 gradients hold 1152 bytes; the zero gradients are
// given back, the flat weights (576) come and binding them frees the parameters' own, the flat
// gradients (576) come, then Adam's two moments of a quarter (2 x 36 floats, 288). The mark is 1152 +
// 288, what stays, not the 1152 + 576 + 576 + 288 of holding all at once. The values move along; a
// gradient that is not zero would be lost, so it is refused.
TEST(shapes_only, an_update_built_from_a_model_never_holds_it_twice) {
  constexpr std::int64_t model = 2 * 144 * sizeof(float);
  constexpr std::int64_t moments = 2 * 36 * sizeof(float);
  for (const auto how : {sim_gpu::execution::full, sim_gpu::execution::shapes_only}) {
    const auto report = sim_gpu::run(
        4, sim::presets::mi210_nodes(4),
        [&](sim_gpu::communicator& world) {
          data_parallel_mesh mesh(world, 4, coordinates<1>{1});
          two_parameters parameters(mesh.tensor_parallel());
          const auto& memory = *element_memory::of_this_thread();
          EXPECT_EQ(memory.bytes_held(), model);
          if (memory.stores_elements()) {
            parameters.bias.gradient.data()[5] = 3.0f;
            EXPECT_THROW(
                {
                  try {
                    const optim::sharded_update<optim::adam> refused(parameters, mesh.data());
                  } catch (const argument_error& e) {
                    EXPECT_NE(std::string(e.what()).find("parameter \"bias\" has a gradient that is not zero"),
                              std::string::npos)
                        << e.what();
                    throw;
                  }
                },
                argument_error);
            parameters.bias.gradient.data()[5] = 0.0f;
          }
          const optim::sharded_update<optim::adam> update(parameters, mesh.data());
          EXPECT_EQ(memory.bytes_held(), model + moments);
          EXPECT_EQ(update.gradient_storage(1).data(), parameters.bias.gradient.data().data());
          if (memory.stores_elements()) {
            EXPECT_EQ(update.weights(0)[7], 0.5f);
            EXPECT_EQ(update.weights(1)[7], 1.0f);
          }
        },
        how);
    for (const std::int64_t mark : report.memory_high_water) EXPECT_EQ(mark, model + moments);
  }
}

// A model whose weight refuses the update's storage (a stand-in for running out of memory while the
// update binds the parameters, after it has taken their gradients): the model keeps zero gradients of
// its own and its values.
template <class Mesh>
struct refusing_storage {
  using tensor = dtensor<float, row_1d<>, Mesh>;
  struct refusing_bind : tensor {
    using tensor::tensor;
    explicit refusing_bind(tensor&& values) : tensor(std::move(values)) {}
    void bind(const shared_buffer<float>&) { throw std::bad_alloc(); }
  };
  struct refusing_parameter {
    refusing_bind value;
    tensor gradient;
  };
  refusing_parameter weight;
  nn::parameter<float, row_1d<>, Mesh> bias;
  explicit refusing_storage(Mesh& mesh)
      : weight{refusing_bind(from_function<row_1d<>>(mesh, {8, 16}, [](std::int64_t, std::int64_t) { return 0.5f; })),
               tensor(mesh, {8, 16})},
        bias(mesh, {1, 16}, 1.0f) {}
  template <class F>
  void for_each_parameter(F&& f) {
    f("weight", weight);
    f("bias", bias);
  }
};

TEST(shapes_only, an_update_that_fails_while_built_leaves_the_model_working) {
  sim_gpu::run(4, sim::presets::mi210_nodes(4), [](sim_gpu::communicator& world) {
    data_parallel_mesh mesh(world, 4, coordinates<1>{1});
    refusing_storage<std::remove_cvref_t<decltype(mesh.tensor_parallel())>> parameters(mesh.tensor_parallel());
    EXPECT_THROW(optim::sharded_update<optim::adam>(parameters, mesh.data()), std::bad_alloc);
    EXPECT_FALSE(parameters.weight.gradient.is_bound());
    EXPECT_FALSE(parameters.bias.gradient.is_bound());
    EXPECT_EQ(parameters.weight.gradient.data().size(), 128U);
    EXPECT_TRUE(std::ranges::all_of(parameters.weight.gradient.data(), [](float g) { return g == 0; }));
    EXPECT_EQ(parameters.weight.value.data()[5], 0.5f);
    EXPECT_EQ(element_memory::of_this_thread()->bytes_held(), 2 * 144 * sizeof(float));
  });
}

}  // namespace
