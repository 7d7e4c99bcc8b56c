// nn layers on every backend: a Transformer block (and so its layer norms, self-attention, MLP and
// linears) in the 1-D (with and without sequence parallelism), 2-D and 3-D families gives the output, input gradient
// and every parameter gradient of the same block computed on one rank — the serial computation on the full tensors,
// with the same initial weights (they are keyed by global index) — and the same bits when it recomputes attention's
// probabilities or all its activations in the backward pass (block_options::recompute), and with the
// sequence-parallel family's collective products unfused (block_options::products); that serial block's backward
// matches finite differences. The ops inside are checked against independent serial code in
// tests/ops/. The sequence-parallel, 2-D and 3-D families' comparisons compile in sources of their own
// (transformer_block_checks.hpp).
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "nn/transformer_block_checks.hpp"
#include "shardwise/comm/threads.hpp"
#include "shardwise/core/error.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/nn/transformer_block.hpp"
#include "shardwise/ops/matmul.hpp"
#include "shardwise/tensor/distribute.hpp"
#include "support/backends.hpp"

namespace shardwise::testing {

block_results serial_block(const nn::block_options& options, std::int64_t batch) {
  block_results results;
  threads::run(1, [&](communicator auto& world) {
    process_mesh mesh(world, {1});
    results = run_block<nn::tensor_parallel_1d<>>(mesh, options, batch);
  });
  return results;
}

}  // namespace shardwise::testing

namespace {

using namespace shardwise;
using shardwise::testing::check_family;
using shardwise::testing::gradient_value;
using shardwise::testing::input_value;
using shardwise::testing::matrix;

template <class Backend>
class transformer_block_test : public ::testing::Test {};
TYPED_TEST_SUITE(transformer_block_test, shardwise::testing::backends);

TYPED_TEST(transformer_block_test, equals_the_serial_block_in_1d_2d_and_3d) {
  TypeParam::run(
      [](communicator auto& world) {
        const int ranks = world.size();
        {  // 1-D: heads and the MLP's width over the ranks
          process_mesh mesh(world, {ranks});
          check_family<nn::tensor_parallel_1d<>>(
              mesh, {.hidden = 4 * ranks, .heads = 2 * ranks, .sequence = 3, .expansion = 2, .causal = true}, 2, "1-D");
          // Sequence parallelism: the 6 tokens cut over the ranks, unevenly (and none on some) from 4 up
          check_family<nn::sequence_parallel_1d<padded>>(
              mesh, {.hidden = 4 * ranks, .heads = 2 * ranks, .sequence = 3, .expansion = 2, .causal = true}, 2,
              "1-D, sequence-parallel");
          // Its collective products unfused: the whole all-gather or reduce-scatter beside the GEMM.
          check_family<nn::sequence_parallel_1d<padded>>(mesh,
                                                         {.hidden = 4 * ranks,
                                                          .heads = 2 * ranks,
                                                          .sequence = 3,
                                                          .expansion = 2,
                                                          .causal = true,
                                                          .products = {.collective = collective_matmul_form::unfused}},
                                                         2, "1-D, sequence-parallel, unfused");
        }
        if (ranks == 4 || ranks == 9) {  // 2-D: samples over grid rows, heads over grid columns
          const int q = ranks == 4 ? 2 : 3;
          process_mesh mesh(world, {q, q});
          check_family<nn::tensor_parallel_2d<>>(mesh, {.hidden = 2 * q, .heads = q, .sequence = 2, .expansion = 2}, q,
                                                 "2-D");
        }
        if (ranks == 4 || ranks == 8) {  // 3-D: the cube, and the rectangular 1x2x2 grid
          const int px = ranks == 8 ? 2 : 1;
          process_mesh mesh(world, {px, 2, 2});
          check_family<nn::tensor_parallel_3d<>>(mesh, {.hidden = 4 * px, .heads = 2, .sequence = 2, .expansion = 2},
                                                 2 * px, "3-D");
        }
      },
      {1, 2, 3, 4, 8, 9});
}

// Finite differences of loss = sum(y ∘ dy) against the serial block's backward, for a few input
// elements and a few elements of each parameter.
// Parameters come with stable hierarchical names, in a fixed order; backward adds into the gradients.
TEST(transformer_block_serial, names_parameters_and_accumulates_gradients) {
  threads::run(1, [](communicator auto& world) {
    process_mesh mesh(world, {1});
    using family = nn::tensor_parallel_1d<>;
    const nn::block_options options{.hidden = 4, .heads = 2, .sequence = 3, .expansion = 2, .causal = true};
    nn::transformer_block<double, family, decltype(mesh)> block(mesh, options, 3);
    std::vector<std::string> names;
    block.for_each_parameter([&](const std::string& name, auto&) { names.push_back(name); }, "blocks.0.");
    const std::vector<std::string> expected{
        "blocks.0.norm_1.weight",          "blocks.0.norm_1.bias",          "blocks.0.attention.query.weight",
        "blocks.0.attention.query.bias",   "blocks.0.attention.key.weight", "blocks.0.attention.key.bias",
        "blocks.0.attention.value.weight", "blocks.0.attention.value.bias", "blocks.0.attention.output.weight",
        "blocks.0.attention.output.bias",  "blocks.0.norm_2.weight",        "blocks.0.norm_2.bias",
        "blocks.0.mlp.expand.weight",      "blocks.0.mlp.expand.bias",      "blocks.0.mlp.contract.weight",
        "blocks.0.mlp.contract.bias"};
    EXPECT_EQ(names, expected);

    const matrix_extents extents{2 * options.sequence, options.hidden};
    const auto x = from_function<family::input>(mesh, extents, input_value);
    const auto dy = from_function<family::input>(mesh, extents, gradient_value);
    std::vector<matrix> once;
    (void)block.forward(x);
    (void)block.backward(dy);
    block.for_each_parameter([&](const std::string&, auto& p) { once.push_back(p.gradient.local()); });
    (void)block.forward(x);
    (void)block.backward(dy);
    std::size_t index = 0;
    block.for_each_parameter([&](const std::string& name, auto& p) {
      EXPECT_TRUE(p.gradient.local().isApprox(2 * once[index], 1e-12)) << name << ": two backwards add up";
      p.zero_gradient();
      EXPECT_EQ(p.gradient.local().norm(), 0.0) << name;
      ++index;
    });
  });
}

// block_options::products reaches the products of every linear: chunks = 0, which every product
// refuses, stops the forward in the first one.
TEST(transformer_block_serial, passes_its_products_options_to_its_linears) {
  threads::run(1, [](communicator auto& world) {
    process_mesh mesh(world, {1});
    using family = nn::tensor_parallel_1d<>;
    const nn::block_options options{
        .hidden = 4, .heads = 2, .sequence = 3, .expansion = 2, .causal = true, .products = {.chunks = 0}};
    nn::transformer_block<double, family, decltype(mesh)> block(mesh, options, 3);
    const auto x = from_function<family::input>(mesh, {2 * options.sequence, options.hidden}, input_value);
    try {
      (void)block.forward(x);
      FAIL() << "the block ran its products with chunks = 0";
    } catch (const argument_error& e) {
      EXPECT_NE(std::string(e.what()).find("chunks is 0"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("nn::self_attention::forward"), std::string::npos) << e.what();
    }
  });
}

TEST(transformer_block_serial, backward_matches_finite_differences) {
  threads::run(1, [](communicator auto& world) {
    process_mesh mesh(world, {1});
    using family = nn::tensor_parallel_1d<>;
    using block_type = nn::transformer_block<double, family, decltype(mesh)>;
    const nn::block_options options{.hidden = 4, .heads = 2, .sequence = 3, .expansion = 2, .causal = true};
    const matrix_extents extents{2 * options.sequence, options.hidden};
    block_type block(mesh, options, 3);
    auto x = from_function<family::input>(mesh, extents, input_value);
    const auto dy = from_function<family::input>(mesh, extents, gradient_value);
    auto loss = [&] { return block.forward(x).local().cwiseProduct(dy.local()).sum(); };
    (void)block.forward(x);
    const auto dx = block.backward(dy);
    std::vector<matrix> analytic;
    block.for_each_parameter([&](const std::string&, auto& p) { analytic.push_back(p.gradient.local()); });

    const double h = 1e-6;
    auto central = [&](double& element) {
      const double kept = element;
      element = kept + h;
      const double up = loss();
      element = kept - h;
      const double down = loss();
      element = kept;
      return (up - down) / (2 * h);
    };
    for (std::int64_t i = 0; i < extents.rows; i += 2)
      for (std::int64_t j = 0; j < extents.cols; ++j)
        EXPECT_NEAR(dx.local()(i, j), central(x.local()(i, j)), 1e-6) << "dx (" << i << ", " << j << ")";
    std::size_t index = 0;
    block.for_each_parameter([&](const std::string&, auto& p) {
      const matrix& expected = analytic[index];
      auto values = p.value.local();
      for (std::int64_t k = 0; k < values.size(); k += 3) {
        const std::int64_t i = k / values.cols();
        const std::int64_t j = k % values.cols();
        EXPECT_NEAR(expected(i, j), central(values(i, j)), 1e-6)
            << "parameter " << index << " (" << i << ", " << j << ")";
      }
      ++index;
    });
  });
}

}  // namespace
