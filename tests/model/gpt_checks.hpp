#pragma once
// What the sources of the GPT test (tests/model/gpt_*.cpp) share: the typed test suite, the model's
// configuration and tokens, a run's loss and gradients gathered whole, the model on one rank, and the
// comparison of each family's model with it on every split of the world. Each family's model in each
// element type compiles in a source of its own (`extern template` below), so that no object compiles
// more than one distributed model.
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "shardwise/comm/threads.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/model/gpt.hpp"
#include "shardwise/tensor/distribute.hpp"
#include "support/backends.hpp"

namespace shardwise::testing {

template <class Backend>
class gpt_test : public ::testing::Test {};
TYPED_TEST_SUITE(gpt_test, shardwise::testing::backends);

// Vocabulary 13: no group of 2, 3, 4 or 8 ranks divides it; on 3 ranks the 1-D family's padded
// layouts cut the width 16 and the MLP's 32 unevenly too (whole heads of 2 columns stay on one rank).
inline const model::gpt_config gpt_test_config{
    .vocabulary = 13, .context = 4, .hidden = 16, .heads = 8, .layers = 2, .expansion = 2, .seed = 3};
inline constexpr std::int64_t gpt_test_samples = 8;

inline std::int32_t token_at(std::int64_t i) {
  return static_cast<std::int32_t>((i * 7 + i / 3) % gpt_test_config.vocabulary);
}

// Samples [first, first + count) of the test text: their tokens, and as targets each token's successor.
struct gpt_test_batch {
  std::vector<std::int32_t> tokens, targets;
};
inline gpt_test_batch gpt_test_samples_of(std::int64_t first, std::int64_t count) {
  gpt_test_batch batch;
  for (std::int64_t i = first * gpt_test_config.context; i < (first + count) * gpt_test_config.context; ++i) {
    batch.tokens.push_back(token_at(i));
    batch.targets.push_back(token_at(i + 1));
  }
  return batch;
}

template <class T>
struct gpt_results {
  double loss = 0;
  std::vector<std::string> names;
  std::vector<Eigen::Matrix<nn::gradient_t<T>, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> gradients;
};

// Samples [first, first + count) of the batch through the model; gradients summed over `data`'s replicas
// and divided by their number, then gathered whole. `recompute`: what the blocks compute again in the
// backward pass (gpt_config::recompute).
template <class T, class Family, class Mesh, class Communicator>
gpt_results<T> run_model(Mesh& mesh, Communicator& data, std::int64_t first, std::int64_t count,
                         nn::recomputation recompute = nn::recomputation::none) {
  model::gpt_config config = gpt_test_config;
  config.recompute = recompute;
  model::gpt<T, Family, Mesh> gpt(mesh, config);
  const gpt_test_batch batch = gpt_test_samples_of(first, count);
  gpt_results<T> r;
  r.loss = gpt.forward(batch.tokens, batch.targets);
  gpt.backward();
  data.all_reduce(std::span<double>(&r.loss, 1));
  r.loss /= data.size();
  gpt.for_each_parameter([&](const std::string& name, auto& p) {
    data.all_reduce(p.gradient.data());
    r.names.push_back(name);
    r.gradients.push_back(all_gather(p.gradient) / static_cast<nn::gradient_t<T>>(data.size()));
  });
  return r;
}

template <class T, class U>
void expect_equal(const gpt_results<T>& got, const gpt_results<U>& expected, double tolerance) {
  EXPECT_NEAR(got.loss, expected.loss, tolerance * std::abs(expected.loss)) << "loss";
  ASSERT_EQ(got.names, expected.names);
  for (std::size_t p = 0; p < got.gradients.size(); ++p) {
    const auto& e = expected.gradients[p];
    ASSERT_EQ(got.gradients[p].rows(), e.rows()) << got.names[p];
    ASSERT_EQ(got.gradients[p].cols(), e.cols()) << got.names[p];
    // Relative, but not to a gradient that is zero in exact arithmetic (the keys' bias: softmax does
    // not change when every score of a row moves alike), where both sides are rounding only.
    EXPECT_LE((got.gradients[p].template cast<double>() - e.template cast<double>()).norm(),
              tolerance * std::max<double>(e.norm(), 1e-3))
        << "gradient of " << got.names[p];
  }
}

// The tensor-parallel meshes of this executable's backend on which a family's model runs.
template <class Family>
using family_mesh = process_mesh<backend::communicator_type, Family::mesh_dimensions>;

// The family's model on `mesh`, samples [first, first + count) of the batch, equals `expected`.
template <class T, class Family>
void expect_model_equals(family_mesh<Family>& mesh, backend::communicator_type& data, std::int64_t first,
                         std::int64_t count, const gpt_results<T>& expected, double tolerance,
                         nn::recomputation recompute) {
  expect_equal(run_model<T, Family>(mesh, data, first, count, recompute), expected, tolerance);
}

using gpt_family_1d = nn::tensor_parallel_1d<padded>;
using gpt_family_sequence = nn::sequence_parallel_1d<padded>;
using gpt_family_2d = nn::tensor_parallel_2d<padded>;
using gpt_family_3d = nn::tensor_parallel_3d<directions<>, padded>;

extern template void expect_model_equals<double, gpt_family_1d>(family_mesh<gpt_family_1d>&,
                                                                backend::communicator_type&, std::int64_t, std::int64_t,
                                                                const gpt_results<double>&, double, nn::recomputation);
extern template void expect_model_equals<double, gpt_family_sequence>(family_mesh<gpt_family_sequence>&,
                                                                      backend::communicator_type&, std::int64_t,
                                                                      std::int64_t, const gpt_results<double>&, double,
                                                                      nn::recomputation);
extern template void expect_model_equals<float, gpt_family_sequence>(family_mesh<gpt_family_sequence>&,
                                                                     backend::communicator_type&, std::int64_t,
                                                                     std::int64_t, const gpt_results<float>&, double,
                                                                     nn::recomputation);
extern template void expect_model_equals<double, gpt_family_2d>(family_mesh<gpt_family_2d>&,
                                                                backend::communicator_type&, std::int64_t, std::int64_t,
                                                                const gpt_results<double>&, double, nn::recomputation);
extern template void expect_model_equals<double, gpt_family_3d>(family_mesh<gpt_family_3d>&,
                                                                backend::communicator_type&, std::int64_t, std::int64_t,
                                                                const gpt_results<double>&, double, nn::recomputation);
extern template void expect_model_equals<float, gpt_family_1d>(family_mesh<gpt_family_1d>&, backend::communicator_type&,
                                                               std::int64_t, std::int64_t, const gpt_results<float>&,
                                                               double, nn::recomputation);
extern template void expect_model_equals<float, gpt_family_2d>(family_mesh<gpt_family_2d>&, backend::communicator_type&,
                                                               std::int64_t, std::int64_t, const gpt_results<float>&,
                                                               double, nn::recomputation);
extern template void expect_model_equals<float, gpt_family_3d>(family_mesh<gpt_family_3d>&, backend::communicator_type&,
                                                               std::int64_t, std::int64_t, const gpt_results<float>&,
                                                               double, nn::recomputation);
extern template void expect_model_equals<bf16, gpt_family_1d>(family_mesh<gpt_family_1d>&, backend::communicator_type&,
                                                              std::int64_t, std::int64_t, const gpt_results<bf16>&,
                                                              double, nn::recomputation);
extern template void expect_model_equals<bf16, gpt_family_sequence>(family_mesh<gpt_family_sequence>&,
                                                                    backend::communicator_type&, std::int64_t,
                                                                    std::int64_t, const gpt_results<bf16>&, double,
                                                                    nn::recomputation);
extern template void expect_model_equals<bf16, gpt_family_2d>(family_mesh<gpt_family_2d>&, backend::communicator_type&,
                                                              std::int64_t, std::int64_t, const gpt_results<bf16>&,
                                                              double, nn::recomputation);
extern template void expect_model_equals<bf16, gpt_family_3d>(family_mesh<gpt_family_3d>&, backend::communicator_type&,
                                                              std::int64_t, std::int64_t, const gpt_results<bf16>&,
                                                              double, nn::recomputation);

// The model on one rank, the whole batch (threads).
template <class T>
gpt_results<T> serial_gpt() {
  gpt_results<T> r;
  threads::run(1, [&](communicator auto& world) {
    process_mesh mesh(world, {1});
    r = run_model<T, nn::tensor_parallel_1d<>>(mesh, world, 0, gpt_test_samples);
  });
  return r;
}

// Every family on every data x tensor-parallel split of the world that it can use: rank = data
// coordinate * group + tensor-parallel coordinate. With 2 replicas the blocks recompute in the backward
// pass (gpt_config::recompute) attention's probabilities in 1-D, all their activations in the others,
// which must change nothing.
// `expected`: the model on one rank (serial_gpt).
template <class T, class Communicator>
void check_every_mesh(Communicator& world, const gpt_results<T>& expected, double tolerance) {
  for (const int replicas : {1, 2}) {
    if (world.size() % replicas != 0) continue;
    const int group = world.size() / replicas;
    auto data = world.split(world.rank() % group, world.rank() / group);
    auto tensor_parallel = world.split(world.rank() / group, world.rank() % group);
    const std::int64_t count = gpt_test_samples / replicas;
    const std::int64_t first = count * data.rank();
    const auto recomputing = [&](nn::recomputation what) { return replicas == 2 ? what : nn::recomputation::none; };
    SCOPED_TRACE("data " + std::to_string(replicas) + " x tensor-parallel " + std::to_string(group) +
                 (replicas == 2 ? ", recomputing" : ""));
    {
      process_mesh mesh(tensor_parallel, {group});
      SCOPED_TRACE("1-D");
      expect_model_equals<T, gpt_family_1d>(mesh, data, first, count, expected, tolerance,
                                            recomputing(nn::recomputation::attention));
      SCOPED_TRACE("sequence-parallel");
      expect_model_equals<T, gpt_family_sequence>(mesh, data, first, count, expected, tolerance,
                                                  recomputing(nn::recomputation::block));
    }
    if (group == 4 || group == 1) {  // SUMMA runs on square grids
      process_mesh mesh(tensor_parallel, group == 4 ? coordinates<2>{2, 2} : coordinates<2>{1, 1});
      SCOPED_TRACE("2-D " + shape_string(mesh.shape()));
      expect_model_equals<T, gpt_family_2d>(mesh, data, first, count, expected, tolerance,
                                            recomputing(nn::recomputation::block));
    }
    if (group == 8 || group == 4 || group == 1) {
      process_mesh mesh(tensor_parallel, group == 8   ? coordinates<3>{2, 2, 2}
                                         : group == 4 ? coordinates<3>{1, 2, 2}
                                                      : coordinates<3>{1, 1, 1});
      SCOPED_TRACE("3-D " + shape_string(mesh.shape()));
      expect_model_equals<T, gpt_family_3d>(mesh, data, first, count, expected, tolerance,
                                            recomputing(nn::recomputation::block));
    }
  }
}

}  // namespace shardwise::testing
