#pragma once
// What the sources of the model update test share: the typed test suite, a training run's weights and
// gradient norms, and the GPT trained on a data x tensor-parallel mesh. The 2-D and 3-D families' models,
// with each optimizer, compile in sources of their own (`extern template` below), so that no object
// compiles more than one distributed GPT.
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "shardwise/layout/cube_3d.hpp"
#include "shardwise/mesh/data_parallel_mesh.hpp"
#include "shardwise/mesh/shape.hpp"
#include "shardwise/model/gpt.hpp"
#include "shardwise/nn/family.hpp"
#include "shardwise/optim/lamb.hpp"
#include "shardwise/optim/lars.hpp"
#include "shardwise/optim/sharded.hpp"
#include "shardwise/tensor/distribute.hpp"
#include "support/backends.hpp"

namespace shardwise::testing {

using matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <class Backend>
class model_update : public ::testing::Test {};
TYPED_TEST_SUITE(model_update, backends);

inline constexpr int steps = 3;

struct trained {
  std::vector<matrix> parameters;      // whole, in the model's order
  std::vector<double> gradient_norms;  // reported by each step
};

inline const model::gpt_config gpt_config{
    .vocabulary = 13, .context = 4, .hidden = 16, .heads = 8, .layers = 1, .expansion = 2, .seed = 9};

// How train_gpt reduces the gradients: the update's buckets, and whether each starts its reduction as
// the backward pass completes its gradients (gradients_ready) or in the step.
struct gradient_reduction {
  std::size_t bucket_elements = 0;
  bool during_backward = false;
};

// The family's GPT trained on data `replicas` x `grid`, each replica on its share of the same batches.
template <class Family, class Optimizer, class Communicator, std::size_t D>
trained train_gpt(Communicator& world, int replicas, const coordinates<D>& grid, Optimizer hyper_parameters,
                  gradient_reduction reduction = {}) {
  data_parallel_mesh mesh(world, replicas, grid);
  model::gpt<float, Family, typename decltype(mesh)::tensor_parallel_mesh_type> gpt(mesh.tensor_parallel(), gpt_config);
  optim::sharded_update<Optimizer> update(gpt, mesh.data(), hyper_parameters, {reduction.bucket_elements});
  constexpr std::int64_t samples = 8;
  const std::int64_t count = samples / replicas;
  trained result;
  for (int step = 0; step < steps; ++step) {
    std::vector<std::int32_t> tokens, targets;
    for (std::int64_t i = mesh.replica() * count * gpt_config.context;
         i < (mesh.replica() + 1) * count * gpt_config.context; ++i) {
      tokens.push_back(static_cast<std::int32_t>((i * 3 + step + i / 5) % gpt_config.vocabulary));
      targets.push_back(static_cast<std::int32_t>((i * 3 + step + 1) % gpt_config.vocabulary));
    }
    (void)gpt.forward(tokens, targets);
    if (reduction.during_backward) {
      gpt.backward(1.0f,
                   [&](std::size_t first, std::size_t count) { update.gradients_ready(mesh.data(), first, count); });
    } else {
      gpt.backward();
    }
    result.gradient_norms.push_back(
        update.step(mesh.data(), mesh.tensor_parallel().world(), {0.02f, 0.5f}).gradient_norm);
  }
  // Not the keys' bias: it changes no output (softmax ignores a shift of a row's scores), so its
  // gradient is rounding alone, which Adam's and LAMB's normalised steps turn into steps of the rate.
  gpt.for_each_parameter([&](const std::string& name, auto& p) {
    if (name.find("key.bias") == std::string::npos) result.parameters.push_back(all_gather(p.value));
  });
  return result;
}

extern template trained train_gpt<nn::tensor_parallel_2d<padded>>(backend::communicator_type&, int,
                                                                  const coordinates<2>&, optim::lamb,
                                                                  gradient_reduction);
extern template trained train_gpt<nn::tensor_parallel_2d<padded>>(backend::communicator_type&, int,
                                                                  const coordinates<2>&, optim::lars,
                                                                  gradient_reduction);
extern template trained train_gpt<nn::tensor_parallel_3d<directions<>, padded>>(backend::communicator_type&, int,
                                                                                const coordinates<3>&, optim::lamb,
                                                                                gradient_reduction);
extern template trained train_gpt<nn::tensor_parallel_3d<directions<>, padded>>(backend::communicator_type&, int,
                                                                                const coordinates<3>&, optim::lars,
                                                                                gradient_reduction);

}  // namespace shardwise::testing
