// The GPT model on every backend: in the 1-D (with and without sequence parallelism), 2-D and 3-D
// families, with 1 and 2 data-parallel replicas (the latter with blocks that recompute in the backward pass:
// attention's probabilities in 1-D, all their activations in the others), vocabulary and widths that
// the tensor-parallel group does not divide, the loss and every parameter's gradient (averaged over the replicas) equal
// those of the same model on one rank computed on the whole batch — in double to 1e-10, in float to 1e-4, relative. The
// families' models compile in sources of their own (gpt_checks.hpp): gpt_float_test.cpp compares in float,
// gpt_learning_test.cpp trains a tiny model, gpt_1d_*_test.cpp sample and check causality; this source compares in
// double, checks the serial model's gradients against finite differences, and that the config's products
// options reach the blocks.
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "model/gpt_checks.hpp"
#include "shardwise/comm/threads.hpp"
#include "shardwise/core/error.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/model/gpt.hpp"
#include "shardwise/nn/no_grad.hpp"
#include "support/backends.hpp"
#include "support/messages.hpp"

namespace {

using namespace shardwise;
using namespace shardwise::testing;

TYPED_TEST(gpt_test, loss_and_gradients_equal_one_rank_in_double) {
  TypeParam::run([](communicator auto& world) { check_every_mesh<double>(world, serial_gpt<double>(), 1e-10); },
                 {1, 2, 3, 4, 8});
}

// The serial model's gradients are the loss's derivatives: central differences of the loss in double,
// for elements of every kind of parameter (the tied table through both its uses, positions, a block's
// weights and biases, the final norm).
TEST(gpt_serial, gradients_match_finite_differences) {
  threads::run(1, [](communicator auto& world) {
    process_mesh mesh(world, {1});
    model::gpt<double, nn::tensor_parallel_1d<>, decltype(mesh)> gpt(mesh, gpt_test_config);
    const auto [tokens, targets] = gpt_test_samples_of(0, 2);
    (void)gpt.forward(tokens, targets);
    gpt.backward();
    int checked = 0;
    gpt.for_each_parameter([&](const std::string& name, auto& p) {
      auto values = p.value.local();
      const auto gradient = p.gradient.local();
      for (std::int64_t k = 0; k < values.size(); k += 7) {
        const std::int64_t i = k / values.cols(), j = k % values.cols();
        const double kept = values(i, j);
        constexpr double h = 1e-6;
        values(i, j) = kept + h;
        const double up = gpt.forward(tokens, targets);
        values(i, j) = kept - h;
        const double down = gpt.forward(tokens, targets);
        values(i, j) = kept;
        EXPECT_NEAR(gradient(i, j), (up - down) / (2 * h), 1e-7) << name << " (" << i << ", " << j << ")";
        ++checked;
      }
    });
    EXPECT_GT(checked, 100);
  });
}

// Passes before a step add up, as micro-batches need: after two, every gradient is the sum of the two
// passes' alone, the tied table's included, into which both the head and the lookup add.
TEST(gpt_serial, backward_passes_add_into_the_gradients) {
  threads::run(1, [](communicator auto& world) {
    process_mesh mesh(world, {1});
    model::gpt<double, nn::tensor_parallel_1d<>, decltype(mesh)> gpt(mesh, gpt_test_config);
    const auto gradients_after = [&](std::initializer_list<std::int64_t> first_samples) {
      gpt.for_each_parameter([](const std::string&, auto& p) { p.zero_gradient(); });
      for (const std::int64_t first : first_samples) {
        const auto [tokens, targets] = gpt_test_samples_of(first, 2);
        (void)gpt.forward(tokens, targets);
        gpt.backward();
      }
      std::vector<Eigen::MatrixXd> gradients;
      gpt.for_each_parameter([&](const std::string&, auto& p) { gradients.emplace_back(p.gradient.local()); });
      return gradients;
    };
    const auto first = gradients_after({0});
    const auto second = gradients_after({2});
    const auto both = gradients_after({0, 2});
    std::size_t k = 0;
    gpt.for_each_parameter([&](const std::string& name, auto&) {
      EXPECT_LE((both[k] - first[k] - second[k]).cwiseAbs().maxCoeff(), 1e-12) << name;
      ++k;
    });
  });
}

// backward(scale, ready) tells every parameter once, numbered as for_each_parameter numbers them, and
// only once its gradient is complete: what each held when told is what it holds after the pass.
TYPED_TEST(gpt_test, backward_tells_each_parameter_once_its_gradient_is_complete) {
  TypeParam::run(
      [](communicator auto& world) {
        process_mesh mesh(world, {world.size()});
        model::gpt<double, gpt_family_1d, decltype(mesh)> gpt(mesh, gpt_test_config);
        std::vector<std::span<const double>> gradients;
        gpt.for_each_parameter([&](const std::string&, auto& p) { gradients.emplace_back(p.gradient.data()); });
        const auto [tokens, targets] = gpt_test_samples_of(0, 2);
        (void)gpt.forward(tokens, targets);
        std::vector<std::vector<double>> when_told(gradients.size());
        std::vector<int> told(gradients.size());
        gpt.backward(1.0, [&](std::size_t first, std::size_t count) {
          ASSERT_LE(first + count, gradients.size());
          for (std::size_t p = first; p < first + count; ++p) {
            ++told[p];
            when_told[p].assign(gradients[p].begin(), gradients[p].end());
          }
        });
        for (std::size_t p = 0; p < gradients.size(); ++p) {
          EXPECT_EQ(told[p], 1) << "parameter " << p;
          EXPECT_EQ(when_told[p], std::vector<double>(gradients[p].begin(), gradients[p].end())) << "parameter " << p;
        }
      },
      {1, 2, 4});
}

// Under nn::no_grad the model's forward gives the same loss, bit for bit, and keeps nothing for a
// backward, which then throws on every rank; the next forward without the guard keeps again.
TYPED_TEST(gpt_test, a_forward_under_no_grad_gives_the_loss_and_keeps_nothing) {
  TypeParam::run(
      [](communicator auto& world) {
        process_mesh mesh(world, {world.size()});
        model::gpt<double, gpt_family_1d, decltype(mesh)> gpt(mesh, gpt_test_config);
        const auto [tokens, targets] = gpt_test_samples_of(0, 2);
        const double training = gpt.forward(tokens, targets);
        gpt.backward();
        {
          const nn::no_grad evaluating;
          EXPECT_EQ(gpt.forward(tokens, targets), training);
          EXPECT_THROW(gpt.backward(), argument_error);
        }
        EXPECT_EQ(gpt.forward(tokens, targets), training);
        gpt.backward();
      },
      {1, 2, 4});
}

// A token or a target that is not in the vocabulary is refused on every rank, naming it and where it is.
TYPED_TEST(gpt_test, a_token_or_target_outside_the_vocabulary_is_an_error_naming_it) {
  TypeParam::run(
      [](communicator auto& world) {
        process_mesh mesh(world, {world.size()});
        model::gpt<double, gpt_family_1d, decltype(mesh)> gpt(mesh, gpt_test_config);
        auto [tokens, targets] = gpt_test_samples_of(0, 2);
        const std::string call =
            "[rank " + std::to_string(world.world_rank()) + "] model::gpt::forward(8 tokens, 8 targets): ";
        targets[5] = 13;
        EXPECT_EQ(message_of<argument_error>([&] { (void)gpt.forward(tokens, targets); }),
                  call +
                      "nn::language_model_loss::forward(replicated<> 8x16, 8 targets): vocabulary_cross_entropy("
                      "replicated<> 8x16, col_1d<ragged> 13x16): target 13 at position 5 is outside the vocabulary "
                      "of 13");
        tokens[2] = -1;
        EXPECT_EQ(message_of<argument_error>([&] { (void)gpt.forward(tokens, targets); }),
                  call +
                      "nn::embedding::forward(8 tokens, sequence 4): embedding lookup: token -1 at position 2 is "
                      "outside the vocabulary of 13");
      },
      {1, 2});
}

// gpt_config::products reaches the blocks' products: chunks = 0, which every product refuses, stops the
// forward in the first block.
TEST(gpt_serial, passes_its_products_options_to_its_blocks) {
  threads::run(1, [](communicator auto& world) {
    process_mesh mesh(world, {1});
    model::gpt_config config = gpt_test_config;
    config.products.chunks = 0;
    model::gpt<double, gpt_family_1d, decltype(mesh)> gpt(mesh, config);
    const auto [tokens, targets] = gpt_test_samples_of(0, 2);
    try {
      (void)gpt.forward(tokens, targets);
      FAIL() << "the model ran its products with chunks = 0";
    } catch (const argument_error& e) {
      EXPECT_NE(std::string(e.what()).find("nn::transformer_block::forward"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("chunks is 0"), std::string::npos) << e.what();
    }
  });
}

}  // namespace
