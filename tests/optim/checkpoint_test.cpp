// Checkpoints of the sharded update: a round trip is bit-exact, a checkpoint saved by P replicas loads
// into P − 1 (resharding) and into a replicated update with the same weights and state, and a missing,
// truncated or corrupted shard is an error naming the file. (checkpoint_fuzz_test.cpp feeds the reader
// every truncation and many byte flips; checkpoint_kill_test.cpp kills saves.)
#include "shardwise/optim/checkpoint.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

#include "shardwise/optim/adafactor.hpp"
#include "shardwise/optim/adam.hpp"
#include "shardwise/optim/lamb.hpp"
#include "shardwise/optim/momentum.hpp"
#include "shardwise/optim/sharded.hpp"
#include "support/backends.hpp"
#include "support/elements.hpp"
#include "support/files.hpp"
#include "support/messages.hpp"

namespace {

using namespace shardwise;
using namespace shardwise::testing;
using optim::parameter_shape;

template <class Backend>
class checkpoint : public ::testing::Test {};
TYPED_TEST_SUITE(checkpoint, backends);

const std::vector<parameter_shape> shapes = {{7, 5}, {1, 13}, {3, 11}};

float value(int rank, long step, std::size_t tensor, std::size_t i) {
  return static_cast<float>(static_cast<int>((rank * 131 + step * 71 + tensor * 31 + i * 17) % 201) - 100) / 100.0f;
}

template <class Update, class C>
void train(Update& update, C& comm, long steps) {
  for (std::size_t t = 0; t < shapes.size(); ++t) {
    std::vector<float> w(shapes[t].size());
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = value(0, 0, t, i);
    update.set_weights(t, w);
  }
  for (long step = 1; step <= steps; ++step) {
    for (std::size_t t = 0; t < shapes.size(); ++t)
      for (std::size_t i = 0; i < shapes[t].size(); ++i) update.gradients(t)[i] = value(comm.rank() + 1, step, t, i);
    update.step(comm, 0.01f);
  }
}

// A folder shared by the ranks, holding the checkpoint of an Adam update of `shapes` after `steps` steps.
template <class C>
std::filesystem::path saved_adam_checkpoint(C& comm, const std::string& name, long steps) {
  const auto directory = shared_folder(comm, name);
  optim::sharded_update<optim::adam> original(comm, shapes);
  train(original, comm, steps);
  optim::save_checkpoint(comm, original, directory);
  return directory;
}

// Loading `directory` into `update` throws checkpoint_error, whose message holds each of `words`.
template <class Update, class C>
void expect_refused(C& comm, Update& update, const std::filesystem::path& directory,
                    std::initializer_list<std::string> words) {
  const auto message = message_of<optim::checkpoint_error>([&] { optim::load_checkpoint(comm, update, directory); });
  for (const auto& w : words) EXPECT_NE(message.find(w), std::string::npos) << message;
}

// Weights, every state variable and the per-tensor state of `restored` (on `restored_comm`) are
// bitwise those of `original` (gathered on `comm` by every rank beforehand).
struct snapshot {
  long steps = 0;
  std::vector<std::vector<float>> weights;
  std::vector<std::vector<std::vector<float>>> state;  // [tensor][variable]
  std::vector<std::vector<float>> tensor_state;
};

template <class Update, class C>
snapshot take_snapshot(const Update& update, C& comm) {
  snapshot s;
  s.steps = update.steps_done();
  for (std::size_t t = 0; t < shapes.size(); ++t) {
    const auto w = update.weights(t);
    s.weights.push_back(std::vector<float>(w.begin(), w.end()));
    s.state.emplace_back();
    for (std::size_t k = 0; k < optim::state_count<typename Update::optimizer_type>; ++k)
      s.state.back().push_back(update.gather_state(comm, k, t));
    const auto ts = update.tensor_state(t);
    s.tensor_state.push_back(std::vector<float>(ts.begin(), ts.end()));
  }
  return s;
}

void expect_same(const snapshot& actual, const snapshot& expected) {
  EXPECT_EQ(actual.steps, expected.steps);
  for (std::size_t t = 0; t < shapes.size(); ++t) {
    SCOPED_TRACE("tensor " + std::to_string(t));
    EXPECT_TRUE(same_elements(actual.weights[t], expected.weights[t]));
    for (std::size_t k = 0; k < expected.state[t].size(); ++k)
      EXPECT_TRUE(same_elements(actual.state[t][k], expected.state[t][k])) << "state variable " << k;
    EXPECT_TRUE(same_elements(actual.tensor_state[t], expected.tensor_state[t]));
  }
}

template <class F>
void for_each_optimizer(F&& f) {
  f("momentum", optim::momentum{});
  f("adam", optim::adam{});
  f("lamb", optim::lamb{});
  f("adafactor", optim::adafactor{});
}

TYPED_TEST(checkpoint, round_trip_is_bit_exact_and_loads_into_fewer_replicas) {
  TypeParam::run(
      [](communicator auto& comm) {
        for_each_optimizer([&](const char* name, auto hyper) {
          using O = decltype(hyper);
          SCOPED_TRACE(std::string(name) + ", P = " + std::to_string(comm.size()));
          const auto directory = shared_folder(comm, std::string("checkpoint-") + name);
          optim::sharded_update<O> original(comm, shapes, hyper, {40});
          train(original, comm, 3);
          optim::save_checkpoint(comm, original, directory);
          const auto saved = take_snapshot(original, comm);

          // The same replicas: bit-exact, and the next step is the same step.
          optim::sharded_update<O> same(comm, shapes, hyper, {40});
          optim::load_checkpoint(comm, same, directory);
          expect_same(take_snapshot(same, comm), saved);

          // A replicated update on the same replicas, and a single bucket: the same values.
          optim::replicated_update<O> replicated(comm, shapes, hyper);
          optim::load_checkpoint(comm, replicated, directory);
          expect_same(take_snapshot(replicated, comm), saved);

          // Saved by the replicated update, loaded by a sharded one: the same values again.
          const auto second = shared_folder(comm, std::string("checkpoint-replicated-") + name);
          optim::save_checkpoint(comm, replicated, second);
          optim::sharded_update<O> from_replicated(comm, shapes, hyper);
          optim::load_checkpoint(comm, from_replicated, second);
          expect_same(take_snapshot(from_replicated, comm), saved);

          // P − 1 replicas (resharding, e.g. 4 → 3); the last rank sits it out.
          if (comm.size() > 1) {
            const bool member = comm.rank() < comm.size() - 1;
            auto fewer = comm.split(member ? 0 : 1, comm.rank());
            if (member) {
              optim::sharded_update<O> resharded(fewer, shapes, hyper, {40});
              optim::load_checkpoint(fewer, resharded, directory);
              expect_same(take_snapshot(resharded, fewer), saved);
            }
          }
          comm.barrier();
          if (comm.rank() == 0) {
            std::filesystem::remove_all(directory);
            std::filesystem::remove_all(second);
          }
        });
      },
      {1, 2, 3, 4, 8});
}

TYPED_TEST(checkpoint, bf16_weights_round_trip_through_their_master_weights) {
  TypeParam::run(
      [](communicator auto& comm) {
        const auto directory = shared_folder(comm, "checkpoint-bf16");
        optim::sharded_update<optim::adam, bf16> original(comm, shapes);
        train(original, comm, 2);
        optim::save_checkpoint(comm, original, directory);
        optim::sharded_update<optim::adam, bf16> restored(comm, shapes);
        optim::load_checkpoint(comm, restored, directory);
        for (std::size_t t = 0; t < shapes.size(); ++t) {
          const auto a = original.weights(t);
          const auto b = restored.weights(t);
          EXPECT_TRUE(same_elements(std::span<const bf16>(b), std::span<const bf16>(a)));
        }
        // The master weights came back too: one more identical step gives identical weights.
        for (auto* update : {&original, &restored})
          for (std::size_t t = 0; t < shapes.size(); ++t)
            for (std::size_t i = 0; i < shapes[t].size(); ++i) update->gradients(t)[i] = value(comm.rank(), 9, t, i);
        original.step(comm, 0.01f);
        restored.step(comm, 0.01f);
        for (std::size_t t = 0; t < shapes.size(); ++t)
          EXPECT_TRUE(
              same_elements(std::span<const bf16>(restored.weights(t)), std::span<const bf16>(original.weights(t))));
        comm.barrier();
        if (comm.rank() == 0) std::filesystem::remove_all(directory);
      },
      {1, 3, 4});
}

// An update of other tensors, or of another optimizer, is told which, not just that they differ.
TYPED_TEST(checkpoint, an_update_that_is_not_the_checkpoints_is_an_error_naming_what_differs) {
  TypeParam::run(
      [](communicator auto& comm) {
        const auto directory = saved_adam_checkpoint(comm, "checkpoint-other-update", 1);
        optim::sharded_update<optim::adam> wider(comm, {{7, 5}, {1, 14}, {3, 11}});
        expect_refused(comm, wider, directory,
                       {"it holds 3 tensors, the update 3; tensor 1 is 1x13 there and 1x14 in the update"});
        optim::sharded_update<optim::adam> fewer(comm, {{7, 5}, {1, 13}});
        expect_refused(comm, fewer, directory, {"it holds 3 tensors, the update 2"});
        optim::sharded_update<optim::momentum> other(comm, shapes);
        expect_refused(
            comm, other, directory,
            {"its optimizer state is {first_moment, second_moment}, the update's optimizer keeps {velocity}"});
        comm.barrier();
        if (comm.rank() == 0) std::filesystem::remove_all(directory);
      },
      {1, 3});
}

TYPED_TEST(checkpoint, a_corrupted_truncated_or_missing_shard_is_an_error_naming_the_file) {
  TypeParam::run(
      [](communicator auto& comm) {
        const auto directory = saved_adam_checkpoint(comm, "checkpoint-damaged", 2);
        const auto victim = directory / "step-2" / ("rank-" + std::to_string(comm.size() - 1) + ".bin");
        const auto size = std::filesystem::file_size(victim);

        const auto damage_then_expect = [&](auto damage, const std::string& file, const std::string& words) {
          comm.barrier();
          if (comm.rank() == 0) damage();
          comm.barrier();
          optim::sharded_update<optim::adam> restored(comm, shapes);
          expect_refused(comm, restored, directory, {file, words});
        };
        damage_then_expect(
            [&] {  // flip one byte in the middle
              std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
              f.seekg(static_cast<std::streamoff>(size / 2));
              char byte = 0;
              f.read(&byte, 1);
              byte = static_cast<char>(byte ^ 0x10);
              f.seekp(static_cast<std::streamoff>(size / 2));
              f.write(&byte, 1);
            },
            victim.string(), "is damaged: CRC-32C");
        damage_then_expect([&] { std::filesystem::resize_file(victim, size - 4); }, victim.string(),
                           "truncated or overlong");
        damage_then_expect([&] { std::filesystem::remove(victim); }, victim.string(), "cannot open");
        damage_then_expect([&] { std::filesystem::remove(directory / "step-2" / "manifest"); },
                           (directory / "step-2" / "manifest").string(), "cannot open");
        comm.barrier();
        if (comm.rank() == 0) std::filesystem::remove_all(directory);
      },
      {1, 2, 3, 4});
}

}  // namespace
