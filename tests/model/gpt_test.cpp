// The GPT model on every backend: in the 1-D, 2-D and 3-D families, with 1 and 2 data-parallel
// replicas, vocabulary and widths that the tensor-parallel group does not divide, the loss and every parameter's
// gradient (averaged over the replicas) equal those of the same model on one rank computed on the whole
// batch — in double to 1e-10, in float to 1e-4, relative.
#include "shardwise/model/gpt.hpp"

#include <gtest/gtest.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "shardwise/comm/threads.hpp"
#include "shardwise/data/byte_corpus.hpp"
#include "shardwise/mesh/data_parallel_mesh.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/model/sample.hpp"
#include "shardwise/optim/adamw.hpp"
#include "shardwise/optim/sharded.hpp"
#include "shardwise/tensor/distribute.hpp"
#include "support/backends.hpp"

namespace {

using namespace shardwise;

template <class Backend>
class gpt_test : public ::testing::Test {};
TYPED_TEST_SUITE(gpt_test, shardwise::testing::backends);

// Vocabulary 13: no group of 2, 3, 4 or 8 ranks divides it; on 3 ranks the 1-D family's padded
// layouts cut the width 16 and the MLP's 32 unevenly too (whole heads of 2 columns stay on one rank).
const model::gpt_config config{
    .vocabulary = 13, .context = 4, .hidden = 16, .heads = 8, .layers = 2, .expansion = 2, .seed = 3};
constexpr std::int64_t samples = 8;

std::int32_t token_at(std::int64_t i) { return static_cast<std::int32_t>((i * 7 + i / 3) % config.vocabulary); }

template <class T>
struct results {
  double loss = 0;
  std::vector<std::string> names;
  std::vector<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> gradients;
};

// Samples [first, first + count) of the batch through the model; gradients summed over `data`'s replicas
// and divided by their number, then gathered whole.
template <class T, class Family, class Mesh, class Communicator>
results<T> run_model(Mesh& mesh, Communicator& data, std::int64_t first, std::int64_t count) {
  model::gpt<T, Family, Mesh> gpt(mesh, config);
  std::vector<std::int32_t> tokens, targets;
  for (std::int64_t i = first * config.context; i < (first + count) * config.context; ++i) {
    tokens.push_back(token_at(i));
    targets.push_back(token_at(i + 1));
  }
  results<T> r;
  r.loss = gpt.forward(tokens, targets);
  gpt.backward();
  data.all_reduce(std::span<double>(&r.loss, 1));
  r.loss /= data.size();
  gpt.for_each_parameter([&](const std::string& name, auto& p) {
    data.all_reduce(p.gradient.data());
    r.names.push_back(name);
    r.gradients.push_back(all_gather(p.gradient) / static_cast<T>(data.size()));
  });
  return r;
}

template <class T>
results<T> serial() {
  results<T> r;
  threads::run(1, [&](communicator auto& world) {
    process_mesh mesh(world, {1});
    r = run_model<T, nn::tensor_parallel_1d<>>(mesh, world, 0, samples);
  });
  return r;
}

template <class T>
void expect_equal(const results<T>& got, const results<T>& expected, double tolerance) {
  EXPECT_NEAR(got.loss, expected.loss, tolerance * std::abs(expected.loss)) << "loss";
  ASSERT_EQ(got.names, expected.names);
  for (std::size_t p = 0; p < got.gradients.size(); ++p) {
    const auto& e = expected.gradients[p];
    ASSERT_EQ(got.gradients[p].rows(), e.rows()) << got.names[p];
    ASSERT_EQ(got.gradients[p].cols(), e.cols()) << got.names[p];
    // Relative, but not to a gradient that is zero in exact arithmetic (the keys' bias: softmax does
    // not change when every score of a row moves alike), where both sides are rounding only.
    EXPECT_LE((got.gradients[p] - e).norm(), tolerance * std::max<double>(e.norm(), 1e-3))
        << "gradient of " << got.names[p];
  }
}

// Every family on every data x tensor-parallel split of the world that it can use: rank = data
// coordinate * group + tensor-parallel coordinate.
template <class T, class Communicator>
void check_every_mesh(Communicator& world, double tolerance) {
  const results<T> expected = serial<T>();
  for (const int replicas : {1, 2}) {
    if (world.size() % replicas != 0) continue;
    const int group = world.size() / replicas;
    auto data = world.split(world.rank() % group, world.rank() / group);
    auto tensor_parallel = world.split(world.rank() / group, world.rank() % group);
    const std::int64_t count = samples / replicas;
    const std::int64_t first = count * data.rank();
    SCOPED_TRACE("data " + std::to_string(replicas) + " x tensor-parallel " + std::to_string(group));
    {
      process_mesh mesh(tensor_parallel, {group});
      SCOPED_TRACE("1-D");
      expect_equal(run_model<T, nn::tensor_parallel_1d<padded>>(mesh, data, first, count), expected, tolerance);
    }
    if (group == 4 || group == 1) {  // SUMMA runs on square grids
      process_mesh mesh(tensor_parallel, group == 4 ? coordinates<2>{2, 2} : coordinates<2>{1, 1});
      SCOPED_TRACE("2-D " + detail::shape_string(mesh.shape()));
      expect_equal(run_model<T, nn::tensor_parallel_2d<padded>>(mesh, data, first, count), expected, tolerance);
    }
    if (group == 8 || group == 4 || group == 1) {
      process_mesh mesh(tensor_parallel, group == 8   ? coordinates<3>{2, 2, 2}
                                         : group == 4 ? coordinates<3>{1, 2, 2}
                                                      : coordinates<3>{1, 1, 1});
      SCOPED_TRACE("3-D " + detail::shape_string(mesh.shape()));
      expect_equal(run_model<T, nn::tensor_parallel_3d<directions<>, padded>>(mesh, data, first, count), expected,
                   tolerance);
    }
  }
}

TYPED_TEST(gpt_test, loss_and_gradients_equal_one_rank_in_double) {
  TypeParam::run([](communicator auto& world) { check_every_mesh<double>(world, 1e-10); }, {1, 2, 3, 4, 8});
}

TYPED_TEST(gpt_test, loss_and_gradients_equal_one_rank_in_float) {
  TypeParam::run([](communicator auto& world) { check_every_mesh<float>(world, 1e-4); }, {1, 4, 8});
}

// Sampling is collective and the same on every rank of the mesh; a different seed draws other text.
TYPED_TEST(gpt_test, sampling_gives_the_same_tokens_on_every_rank) {
  TypeParam::run(
      [](communicator auto& world) {
        process_mesh mesh(world, {world.size()});
        model::gpt<float, nn::tensor_parallel_1d<padded>, decltype(mesh)> gpt(mesh, config);
        const std::vector<std::int32_t> prompt{1, 2, 3};
        const auto text = model::sample(gpt, std::span<const std::int32_t>(prompt), 6, 11);
        ASSERT_EQ(text.size(), 6u);
        std::vector<std::int32_t> first = text;
        world.broadcast(std::span<std::int32_t>(first), 0);
        EXPECT_EQ(text, first);
        for (const auto token : text) EXPECT_TRUE(token >= 0 && token < config.vocabulary);
        EXPECT_NE(model::sample(gpt, std::span<const std::int32_t>(prompt), 6, 12), text);
      },
      {1, 2, 4});
}

TEST(gpt_config, errors_name_the_sizes) {
  threads::run(1, [](communicator auto& world) {
    process_mesh mesh(world, {1});
    using model_type = model::gpt<float, nn::tensor_parallel_1d<>, decltype(mesh)>;
    auto bad = config;
    bad.heads = 3;
    try {
      model_type m(mesh, bad);
      FAIL() << "16 wide in 3 heads was accepted";
    } catch (const argument_error& e) {
      EXPECT_NE(std::string(e.what()).find("does not split into 3 heads"), std::string::npos) << e.what();
    }
  });
}

// A tiny model learns: on a text that repeats one sentence, its validation loss falls from about
// ln 256 to well under the sentence's unigram entropy within a few dozen steps, on every data x 1-D split.
TYPED_TEST(gpt_test, a_tiny_model_learns_a_repeated_sentence) {
  TypeParam::run(
      [](communicator auto& world) {
        const auto path =
            std::filesystem::temp_directory_path() / ("shardwise-gpt-learns-" + std::to_string(world.size()) + ".txt");
        if (world.rank() == 0) {
          std::ofstream out(path);
          for (int i = 0; i < 200; ++i) out << "the quick brown fox jumps over the lazy dog. ";
        }
        world.barrier();
        const data::byte_corpus corpus(path);
        const model::gpt_config tiny{
            .vocabulary = 256, .context = 16, .hidden = 32, .heads = 4, .layers = 1, .seed = 2};
        for (const int replicas : {1, world.size()}) {
          data_parallel_mesh mesh(world, replicas, coordinates<1>{world.size() / replicas});
          model::gpt<float, nn::tensor_parallel_1d<>, typename decltype(mesh)::tensor_parallel_mesh_type> gpt(
              mesh.tensor_parallel(), tiny);
          optim::sharded_update<optim::adamw> update(gpt, mesh.data(), optim::adamw{});
          const auto validation = [&] {
            const auto b = corpus.validation_batch(0, 0, 1, 4, tiny.context);
            const double loss = gpt.forward(b.tokens, b.targets);
            return loss;
          };
          const double before = validation();
          for (long step = 1; step <= 60; ++step) {
            const auto b = corpus.training_batch(step, mesh.replica(), replicas, 8 / replicas, tiny.context, 1);
            (void)gpt.forward(b.tokens, b.targets);
            gpt.backward();
            (void)update.step(mesh.data(), mesh.tensor_parallel().world(), {1e-2f, 1.0f});
          }
          const double after = validation();
          EXPECT_GT(before, 5.0) << "an untrained model guesses among 256 bytes";
          EXPECT_LT(after, 1.5) << "data " << replicas << ": from " << before;
        }
        world.barrier();
        if (world.rank() == 0) std::filesystem::remove(path);
      },
      {1, 2});
}

// Causality: a position's hidden state depends on the tokens up to it only. Changing the last token of
// every sample leaves every other position's state as it was.
TYPED_TEST(gpt_test, a_position_sees_no_later_token) {
  TypeParam::run(
      [](communicator auto& world) {
        process_mesh mesh(world, {world.size()});
        model::gpt<double, nn::tensor_parallel_1d<padded>, decltype(mesh)> gpt(mesh, config);
        std::vector<std::int32_t> tokens;
        for (std::int64_t i = 0; i < 2 * config.context; ++i) tokens.push_back(token_at(i));
        const auto before = all_gather(gpt.hidden_states(tokens));
        for (std::int64_t s = 0; s < 2; ++s) {
          auto& last = tokens[static_cast<std::size_t>((s + 1) * config.context - 1)];
          last = (last + 5) % config.vocabulary;
        }
        const auto after = all_gather(gpt.hidden_states(tokens));
        for (std::int64_t row = 0; row < before.rows(); ++row) {
          const bool last = row % config.context == config.context - 1;
          if (last) EXPECT_NE(before.row(row), after.row(row)) << "row " << row;
          else
            EXPECT_EQ(before.row(row), after.row(row)) << "row " << row << " saw a later token";
        }
      },
      {1, 2});
}

// The serial model's gradients are the loss's derivatives: central differences of the loss in double,
// for elements of every kind of parameter (the tied table through both its uses, positions, a block's
// weights and biases, the final norm).
TEST(gpt_serial, gradients_match_finite_differences) {
  threads::run(1, [](communicator auto& world) {
    process_mesh mesh(world, {1});
    model::gpt<double, nn::tensor_parallel_1d<>, decltype(mesh)> gpt(mesh, config);
    std::vector<std::int32_t> tokens, targets;
    for (std::int64_t i = 0; i < 2 * config.context; ++i) {
      tokens.push_back(token_at(i));
      targets.push_back(token_at(i + 1));
    }
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

}  // namespace
