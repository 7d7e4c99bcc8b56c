#pragma once
// What the sources of the model checkpoint test share: the typed test suite, a GPT's training on a data
// x tensor-parallel mesh and its whole state, and loading a checkpoint on another mesh. The 2-D and 3-D
// families' models, loaded there, compile in sources of their own (`extern template` below), so that no
// object compiles more than one distributed model.
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "shardwise/layout/cube_3d.hpp"
#include "shardwise/mesh/data_parallel_mesh.hpp"
#include "shardwise/mesh/shape.hpp"
#include "shardwise/model/gpt.hpp"
#include "shardwise/nn/family.hpp"
#include "shardwise/optim/adamw.hpp"
#include "shardwise/optim/model_checkpoint.hpp"
#include "shardwise/optim/sharded.hpp"
#include "shardwise/tensor/distribute.hpp"
#include "support/backends.hpp"

namespace shardwise::testing {

using matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <class Backend>
class model_checkpoint : public ::testing::Test {};
TYPED_TEST_SUITE(model_checkpoint, shardwise::testing::backends);

inline const model::gpt_config config{
    .vocabulary = 13, .context = 4, .hidden = 16, .heads = 8, .layers = 1, .expansion = 2, .seed = 5};
inline constexpr std::int64_t samples = 8;

// Every parameter, its float32 weights (a bf16 model's master weights) and each of its state
// variables, whole, by name.
using global_state = std::map<std::string, matrix>;

// The model, its sharded AdamW update and the global batch of each step, on data `replicas` x `grid`,
// in float or in mixed precision (T = bf16).
template <class Family, class Communicator, std::size_t D, class T = float>
struct training {
  data_parallel_mesh<Communicator, D> mesh;
  model::gpt<T, Family, typename data_parallel_mesh<Communicator, D>::tensor_parallel_mesh_type> gpt;
  optim::sharded_update<optim::adamw, T> update;

  training(Communicator& world, int replicas, const coordinates<D>& grid)
      : mesh(world, replicas, grid), gpt(mesh.tensor_parallel(), config), update(gpt, mesh.data(), optim::adamw{}) {}

  void step(long number) {
    const std::int64_t count = samples / mesh.replicas();
    std::vector<std::int32_t> tokens, targets;
    for (std::int64_t i = mesh.replica() * count * config.context; i < (mesh.replica() + 1) * count * config.context;
         ++i) {
      tokens.push_back(static_cast<std::int32_t>((i * 5 + number * 3 + i / 7) % config.vocabulary));
      targets.push_back(static_cast<std::int32_t>((i * 5 + number * 3 + 1) % config.vocabulary));
    }
    (void)gpt.forward(tokens, targets);
    gpt.backward();
    (void)update.step(mesh.data(), mesh.tensor_parallel().world(), {0.01f, 1.0f});
  }

  global_state state() {
    global_state whole;
    std::size_t t = 0;
    gpt.for_each_parameter([&](const std::string& name, auto& p) {
      whole[name] = all_gather(p.value).template cast<float>();
      auto master = p.gradient;  // float, in the values' layout; its own storage
      const auto gathered_master = update.gather_master_weights(mesh.data(), t);
      std::copy(gathered_master.begin(), gathered_master.end(), master.data().begin());
      whole[name + "/master"] = all_gather(master);
      for (std::size_t k = 0; k < optim::adamw::state_names.size(); ++k) {
        auto values = p.gradient;  // likewise
        const auto gathered = update.gather_state(mesh.data(), k, t);
        std::copy(gathered.begin(), gathered.end(), values.data().begin());
        whole[name + "/" + std::string(optim::adamw::state_names[k])] = all_gather(values);
      }
      ++t;
    });
    return whole;
  }
};

// Within `tolerance` (0: bit for bit). Rounding aside, the keys' bias has no effect on any output
// (softmax does not change when all scores of a row move alike), so its gradient is rounding alone,
// and Adam, which divides by the gradient's scale, turns that rounding into steps of the learning
// rate: after a step on another mesh it differs, while every output agrees. Compared bitwise only.
inline void expect_equal(const global_state& got, const global_state& expected, float tolerance,
                         const std::string& what) {
  ASSERT_EQ(got.size(), expected.size()) << what;
  for (const auto& [name, values] : expected) {
    if (tolerance != 0 && name.find("key.bias") != std::string::npos) continue;
    const matrix& other = got.at(name);
    ASSERT_EQ(other.rows(), values.rows()) << what << ": " << name;
    if (tolerance == 0) EXPECT_EQ(other, values) << what << ": " << name;
    else
      EXPECT_LE((other - values).norm(), tolerance * (values.norm() + 1e-3f)) << what << ": " << name;
  }
}

// The checkpoint in `folder`, loaded on data `replicas` x `grid` in the family's model: exact copies of
// what was saved, then the same step within rounding.
template <class Family, std::size_t D>
void expect_resumes_elsewhere(backend::communicator_type& world, const std::filesystem::path& folder,
                              const global_state& saved, const global_state& after, int replicas,
                              const coordinates<D>& grid) {
  SCOPED_TRACE("data " + std::to_string(replicas) + " x " + shape_string(grid));
  training<Family, backend::communicator_type, D> run(world, replicas, grid);
  (void)optim::load_model_checkpoint(folder, run.update, world);
  expect_equal(run.state(), saved, 0, "loaded on another mesh");
  run.step(3);
  expect_equal(run.state(), after, 1e-5f, "resumed on another mesh");
}

extern template void expect_resumes_elsewhere<nn::tensor_parallel_2d<padded>>(backend::communicator_type&,
                                                                              const std::filesystem::path&,
                                                                              const global_state&, const global_state&,
                                                                              int, const coordinates<2>&);
extern template void expect_resumes_elsewhere<nn::tensor_parallel_3d<directions<>, padded>>(
    backend::communicator_type&, const std::filesystem::path&, const global_state&, const global_state&, int,
    const coordinates<3>&);

}  // namespace shardwise::testing
