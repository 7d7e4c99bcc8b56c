// The GPT test (gpt_test.cpp): a tiny model learns a repeated sentence.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <type_traits>

#include "model/gpt_checks.hpp"
#include "shardwise/core/bf16.hpp"
#include "shardwise/core/element.hpp"
#include "shardwise/data/byte_corpus.hpp"
#include "shardwise/mesh/data_parallel_mesh.hpp"
#include "shardwise/model/gpt.hpp"
#include "shardwise/optim/adamw.hpp"
#include "shardwise/optim/sharded.hpp"
#include "support/backends.hpp"

namespace {

using namespace shardwise;
using namespace shardwise::testing;

// A tiny model learns: on a text that repeats one sentence, its validation loss falls from about
// ln 256 to well under the sentence's unigram entropy within a few dozen steps, on every data x 1-D split,
// in float and in mixed precision (bf16 weights and activations, the update's float32 master weights).
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
        const auto learns = [&]<class T>(std::type_identity<T>, int replicas) {
          SCOPED_TRACE(element_name<T>() + ", data " + std::to_string(replicas));
          data_parallel_mesh mesh(world, replicas, coordinates<1>{world.size() / replicas});
          model::gpt<T, nn::tensor_parallel_1d<>, typename decltype(mesh)::tensor_parallel_mesh_type> gpt(
              mesh.tensor_parallel(), tiny);
          optim::sharded_update<optim::adamw, T> update(gpt, mesh.data(), optim::adamw{});
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
          EXPECT_LT(after, 1.5) << "from " << before;
        };
        for (const int replicas : {1, world.size()}) {
          learns(std::type_identity<float>{}, replicas);
          learns(std::type_identity<bf16>{}, replicas);
        }
        world.barrier();
        if (world.rank() == 0) std::filesystem::remove(path);
      },
      {1, 2});
}

}  // namespace
