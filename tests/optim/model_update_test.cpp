// The data-parallel update of a tensor-parallel model's parameters: every mesh data x tensor-parallel
// that the ranks form trains the same MLP as one rank does on the whole batch, step for step (LAMB's
// norms and the clipped global gradient norm summed over the right ranks, each element once), and the
// sharded update gives the replicated one's bits. The 2-D and 3-D families' GPTs compile in sources of
// their own (model_update_checks.hpp).
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "optim/model_update_checks.hpp"
#include "shardwise/core/bf16.hpp"
#include "shardwise/layout/cube_3d.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/mesh/shape.hpp"
#include "shardwise/nn/family.hpp"
#include "shardwise/nn/mlp.hpp"
#include "shardwise/optim/adamw.hpp"
#include "shardwise/optim/lamb.hpp"
#include "shardwise/optim/lars.hpp"
#include "shardwise/optim/sharded.hpp"
#include "shardwise/tensor/distribute.hpp"
#include "support/backends.hpp"

namespace {

using namespace shardwise;
using namespace shardwise::testing;

constexpr std::int64_t hidden = 6;
constexpr std::int64_t expanded = 8;
constexpr std::int64_t batch_rows = 8;
constexpr float clip_norm = 0.05f;  // below the gradient norms here, so clipping acts

float input_value(int step, std::int64_t i, std::int64_t j) {
  return static_cast<float>(std::sin(0.7 * static_cast<double>(i * hidden + j) + step));
}
float output_weight(std::int64_t i, std::int64_t j) {
  return static_cast<float>(std::cos(0.3 * static_cast<double>(i + 2 * j)));
}

// Trains an MLP on `data.size()` replicas of a tensor-parallel 1-D mesh over `tensor_parallel`: replica
// r takes rows [r R / N, (r + 1) R / N) of each step's batch, and the loss is the mean over its rows of
// sum(y ∘ G).
template <class Update, class Communicator, class Optimizer>
trained train(Communicator& data, Communicator& tensor_parallel, Optimizer hyper_parameters) {
  process_mesh mesh(tensor_parallel, {tensor_parallel.size()});
  using family = nn::tensor_parallel_1d<>;
  using input_layout = family::input;
  nn::mlp<float, family, decltype(mesh)> model(mesh, hidden, expanded, 5);
  Update update(model, data, hyper_parameters);
  const std::int64_t rows = batch_rows / data.size();
  const std::int64_t first = rows * data.rank();
  trained result;
  for (int step = 0; step < steps; ++step) {
    const auto x = from_function<input_layout>(
        mesh, {rows, hidden}, [&](std::int64_t i, std::int64_t j) { return input_value(step, first + i, j); });
    (void)model.forward(x);
    const auto dy = from_function<input_layout>(mesh, {rows, hidden}, [&](std::int64_t i, std::int64_t j) {
      return output_weight(first + i, j) / static_cast<float>(rows);
    });
    (void)model.backward(dy);
    const auto report = update.step(data, tensor_parallel, optim::step_options{0.02f, clip_norm});
    result.gradient_norms.push_back(report.gradient_norm);
  }
  model.for_each_parameter([&](const std::string&, auto& p) { result.parameters.push_back(all_gather(p.value)); });
  return result;
}

// `bitwise`: the backend sums in rank order, so sharded and replicated give the same bits.
template <class Optimizer, class Communicator>
void expect_every_mesh_trains_as_one_rank(Communicator& world, Optimizer hyper_parameters, bool bitwise) {
  auto self = world.split(world.rank(), 0);
  auto alone = self.split(0, 0);
  const trained serial = train<optim::replicated_update<Optimizer>>(self, alone, hyper_parameters);
  for (int replicas = 1; replicas <= world.size(); ++replicas) {
    if (world.size() % replicas != 0 || batch_rows % replicas != 0) continue;
    const int group = world.size() / replicas;
    if (expanded % group != 0) continue;
    SCOPED_TRACE("data " + std::to_string(replicas) + " x tensor-parallel " + std::to_string(group));
    // Rank = data coordinate * group + tensor-parallel coordinate: the data axis first.
    auto data = world.split(world.rank() % group, world.rank() / group);
    auto tensor_parallel = world.split(world.rank() / group, world.rank() % group);
    const trained sharded = train<optim::sharded_update<Optimizer>>(data, tensor_parallel, hyper_parameters);
    const trained replicated = train<optim::replicated_update<Optimizer>>(data, tensor_parallel, hyper_parameters);
    ASSERT_EQ(sharded.parameters.size(), serial.parameters.size());
    for (std::size_t p = 0; p < serial.parameters.size(); ++p) {
      const matrix& expected = serial.parameters[p];
      EXPECT_LE((sharded.parameters[p] - expected).norm(), 1e-5 * (1 + expected.norm())) << "parameter " << p;
      if (bitwise) {
        EXPECT_EQ(sharded.parameters[p], replicated.parameters[p]) << "parameter " << p << ": sharded == replicated";
      }
    }
    for (int s = 0; s < steps; ++s) {
      EXPECT_NEAR(sharded.gradient_norms[s], serial.gradient_norms[s], 1e-5 * serial.gradient_norms[s]) << "step " << s;
      EXPECT_GT(serial.gradient_norms[s], clip_norm) << "clipping acts in step " << s;
    }
  }
}

TYPED_TEST(model_update, lamb_with_clipping_on_every_data_and_tensor_parallel_mesh_equals_one_rank) {
  TypeParam::run(
      [](communicator auto& world) {
        expect_every_mesh_trains_as_one_rank(world, optim::lamb{.weight_decay = 0.1f}, TypeParam::sums_in_rank_order);
      },
      {1, 2, 4});
}

TYPED_TEST(model_update, adamw_with_clipping_on_every_data_and_tensor_parallel_mesh_equals_one_rank) {
  TypeParam::run(
      [](communicator auto& world) {
        expect_every_mesh_trains_as_one_rank(world, optim::adamw{}, TypeParam::sums_in_rank_order);
      },
      {1, 2, 4});
}

// The update takes the parameters' storage: one copy of the weights, and the update's names.
TYPED_TEST(model_update, parameters_live_in_the_update_and_are_found_by_name) {
  TypeParam::run(
      [](communicator auto& world) {
        process_mesh mesh(world, {world.size()});
        nn::mlp<float, nn::tensor_parallel_1d<>, decltype(mesh)> model(mesh, hidden, expanded, 5);
        auto self = world.split(world.rank(), 0);
        optim::sharded_update<optim::adamw> update(model, self);
        std::size_t t = 0;
        model.for_each_parameter([&](const std::string& name, auto& p) {
          EXPECT_TRUE(p.value.is_bound() && p.gradient.is_bound()) << name;
          EXPECT_EQ(p.value.data().data(), update.weights(t).data()) << name << ": the weights live in the update";
          EXPECT_EQ(update.parameter_index(name), t);
          EXPECT_EQ(update.parameters()[t].extents, p.value.extents()) << name;
          ++t;
        });
        EXPECT_EQ(update.parameters()[update.parameter_index("contract.bias")].counted, world.rank() == 0)
            << "a replicated bias counts on the lowest rank only";
        EXPECT_TRUE(update.parameters()[update.parameter_index("expand.weight")].counted);
        EXPECT_THROW((void)update.parameter_index("expand.wieght"), argument_error);
      },
      {1, 2, 4});
}

// A bf16 model's update keeps float32 master weights: step after step they are bit for bit those of a
// float update given the same weights and gradients, and the model's bf16 weights are their rounding.
TYPED_TEST(model_update, a_bf16_models_update_keeps_float32_master_weights) {
  TypeParam::run(
      [](communicator auto& world) {
        auto self = world.split(world.rank(), 0);
        process_mesh mesh(self, {1});
        nn::mlp<bf16, nn::tensor_parallel_1d<>, decltype(mesh)> model(mesh, hidden, expanded, 5);
        std::vector<std::vector<bf16>> initial;
        std::vector<optim::parameter_shape> shapes;
        model.for_each_parameter([&](const std::string&, auto& p) {
          const auto values = p.value.data();
          initial.emplace_back(values.begin(), values.end());
          shapes.push_back(optim::detail::local_shape(p.value));
        });
        optim::sharded_update<optim::adamw> reference(world, shapes);
        for (std::size_t t = 0; t < initial.size(); ++t)
          reference.set_weights(t, std::vector<float>(initial[t].begin(), initial[t].end()));
        optim::sharded_update<optim::adamw, bf16> update(model, world);
        for (int step = 0; step < 3; ++step) {
          for (std::size_t t = 0; t < initial.size(); ++t) {
            const auto mine = update.gradients(t), theirs = reference.gradients(t);
            for (std::size_t i = 0; i < mine.size(); ++i)
              mine[i] = theirs[i] = input_value(step, world.rank(), static_cast<std::int64_t>(i));
          }
          update.step(world, 1e-2f);
          reference.step(world, 1e-2f);
          std::size_t t = 0;
          model.for_each_parameter([&](const std::string& name, auto& p) {
            const auto values = p.value.data();
            const auto expected = reference.weights(t++);
            for (std::size_t i = 0; i < values.size(); ++i)
              ASSERT_EQ(values[i], bf16(expected[i])) << name << " element " << i << ", step " << step;
          });
        }
        std::size_t t = 0;
        model.for_each_parameter([&](const std::string& name, auto& p) {
          EXPECT_FALSE(std::ranges::equal(p.value.data(), initial[t++])) << name << " did not move";
        });
      },
      {1, 2, 4});
}

// The GPT in every family: LAMB and LARS (whose trust ratios are norms of whole parameters) and the
// clipped global gradient norm give one rank's weights after a few steps, on every data x grid split.
template <class Optimizer, class Communicator>
void expect_every_family_trains_as_one_rank(Communicator& world, Optimizer hyper_parameters) {
  trained serial;
  {
    auto self = world.split(world.rank(), 0);
    serial = train_gpt<nn::tensor_parallel_1d<padded>>(self, 1, coordinates<1>{1}, hyper_parameters);
  }
  const auto expect_serial = [&](const trained& got, const std::string& mesh) {
    SCOPED_TRACE(mesh);
    ASSERT_EQ(got.parameters.size(), serial.parameters.size());
    for (std::size_t p = 0; p < serial.parameters.size(); ++p)
      EXPECT_LE((got.parameters[p] - serial.parameters[p]).norm(), 1e-5 * (1 + serial.parameters[p].norm()))
          << "parameter " << p;
    for (int s = 0; s < steps; ++s)
      EXPECT_NEAR(got.gradient_norms[s], serial.gradient_norms[s], 1e-5 * serial.gradient_norms[s]) << "step " << s;
  };
  const int p = world.size();
  for (const int replicas : {1, 2}) {
    if (p % replicas != 0) continue;
    const int group = p / replicas;
    expect_serial(train_gpt<nn::tensor_parallel_1d<padded>>(world, replicas, coordinates<1>{group}, hyper_parameters),
                  "data " + std::to_string(replicas) + " x 1-D " + std::to_string(group));
    if (group == 4)
      expect_serial(train_gpt<nn::tensor_parallel_2d<padded>>(world, replicas, coordinates<2>{2, 2}, hyper_parameters),
                    "data " + std::to_string(replicas) + " x 2-D 2x2");
    if (group == 8 || group == 4)
      expect_serial(
          train_gpt<nn::tensor_parallel_3d<directions<>, padded>>(
              world, replicas, group == 8 ? coordinates<3>{2, 2, 2} : coordinates<3>{1, 2, 2}, hyper_parameters),
          "data " + std::to_string(replicas) + " x 3-D " + std::to_string(group));
  }
}

TYPED_TEST(model_update, lamb_and_lars_with_clipping_train_the_gpt_as_one_rank_in_every_family) {
  TypeParam::run(
      [](communicator auto& world) {
        expect_every_family_trains_as_one_rank(world, optim::lamb{.weight_decay = 0.1f});
        expect_every_family_trains_as_one_rank(world, optim::lars{});
      },
      {1, 2, 4, 8});
}

// The GPT's gradients reduced bucket by bucket as its backward pass completes them (gradients_ready:
// the final norm's, then the block's, then the embedding's, which the tied head also adds into) give
// the weights of reducing them all in the step.
TYPED_TEST(model_update, gradients_reduced_during_the_gpt_backward_pass_give_the_weights_of_one_step) {
  TypeParam::run(
      [](communicator auto& world) {
        for (const int replicas : {2, 4}) {
          if (world.size() % replicas != 0) continue;
          SCOPED_TRACE("data " + std::to_string(replicas) + " x 1-D " + std::to_string(world.size() / replicas));
          const coordinates<1> grid{world.size() / replicas};
          const trained after = train_gpt<nn::tensor_parallel_1d<padded>>(world, replicas, grid, optim::adamw{},
                                                                          {.bucket_elements = 200});
          const trained during = train_gpt<nn::tensor_parallel_1d<padded>>(
              world, replicas, grid, optim::adamw{}, {.bucket_elements = 200, .during_backward = true});
          ASSERT_EQ(during.parameters.size(), after.parameters.size());
          for (std::size_t p = 0; p < after.parameters.size(); ++p) {
            if (TypeParam::sums_in_rank_order) {
              EXPECT_EQ(during.parameters[p], after.parameters[p]) << "parameter " << p;
            } else {
              EXPECT_LE((during.parameters[p] - after.parameters[p]).norm(), 1e-6 * (1 + after.parameters[p].norm()))
                  << "parameter " << p;
            }
          }
        }
      },
      {2, 4});
}

}  // namespace
