// The DLRM test's training steps, of a float model (dlrm_test.cpp describes the test; dlrm_checks.hpp
// says why this compiles apart): steps of sharded_update + sparse_update on one batch lower the loss,
// and steps on a new batch each equal the same optimizers' steps of the serial DLRM.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "model/dlrm_checks.hpp"
#include "model/dlrm_serial.hpp"
#include "shardwise/data/dlrm_generator.hpp"
#include "shardwise/model/dlrm.hpp"
#include "shardwise/optim/adam.hpp"
#include "shardwise/optim/rowwise_adagrad.hpp"
#include "shardwise/optim/sgd.hpp"
#include "shardwise/optim/sharded.hpp"
#include "shardwise/optim/sparse_sgd.hpp"
#include "shardwise/optim/sparse_update.hpp"
#include "support/backends.hpp"
#include "support/relative_error.hpp"

namespace {

using namespace shardwise;
using namespace shardwise::testing;

TYPED_TEST(dlrm_model, steps_of_the_sharded_and_sparse_updates_lower_the_loss) {
  TypeParam::run(
      [](communicator auto& world) {
        using Comm = std::remove_cvref_t<decltype(world)>;
        data_parallel_mesh mesh(world, world.size(), {1});
        const auto c = config_with(fused::pooling::sum);
        model::dlrm<float, Comm> m(mesh, c, batch);
        optim::sharded_update<optim::adam> dense(m, mesh.data(), optim::adam{});
        optim::sparse_update<optim::rowwise_adagrad> tables(m);
        const auto b =
            generator().batch<float>(data::dlrm_stream::training, 0, batch, m.first_row(), m.rows(), m.input_tables());
        const double first = m.forward(b);
        double last = first;
        for (int step = 0; step < 30; ++step) {
          m.backward();
          dense.step(mesh.data(), mesh.tensor_parallel().world(), {0.01f, 0.0f});
          tables.step(mesh.tensor_parallel().world(), 0.1f);
          last = m.forward(b);
        }
        EXPECT_LT(last, 0.5 * first) << "30 steps on one batch should fit it";
      },
      {1, 2, 4});
}

// The distributed steps run in float (the dense update always does, optim/sharded.hpp) and the serial
// ones in double, so they agree to float's rounding, not to double's. The loss agrees within 1e-6
// (2.4e-8 seen). Weights are compared by their change since the start, each table row's on its own:
// rounding leaves it within 1e-3 of its size over these steps (7e-5 seen), while a wrong update (a row
// updated in the wrong piece, gradients not averaged over the replicas, a sum for a mean, a stale
// gradient) is off by a sizeable part of it. The hyper-parameters make each of the optimizers' terms
// matter: weight decay beside gradients of its size, epsilons near the square roots they are added to.
constexpr double loss_tolerance = 1e-6;
constexpr double change_tolerance = 1e-3;
constexpr int training_steps = 4;

struct learning_rates {
  float dense = 0;
  float tables = 0;
};

template <class Comm, class SerialDense, class SerialTables>
void expect_steps_equal_serial(Comm& world, fused::pooling how, SerialDense serial_dense, SerialTables serial_tables,
                               learning_rates rates) {
  const auto c = config_with(how);
  data_parallel_mesh mesh(world, world.size(), {1});
  model::dlrm<float, Comm> m(mesh, c, batch);
  const serial_dlrm initial = serial_of(m, c);
  serial_dlrm s = initial;
  optim::sharded_update<decltype(serial_dense.hyper_parameters)> dense(m, mesh.data(), serial_dense.hyper_parameters);
  optim::sparse_update<decltype(serial_tables.hyper_parameters)> tables(m, serial_tables.hyper_parameters);
  const auto gen = generator();
  const auto every_table = all_tables();
  const std::string what =
      std::string(how == fused::pooling::sum ? "sum" : "mean") + ", rank " + std::to_string(world.rank());
  for (int step = 0; step < training_steps; ++step) {
    const std::int64_t first_sample = step * batch;
    const auto whole = gen.batch<float>(data::dlrm_stream::training, first_sample, batch, 0, batch, every_table);
    const auto mine =
        gen.batch<float>(data::dlrm_stream::training, first_sample, batch, m.first_row(), m.rows(), m.input_tables());
    serial_dlrm::gradients g;
    const double expected = s.loss(whole, &g);
    EXPECT_NEAR(m.forward(mine), expected, loss_tolerance * std::abs(expected)) << what << ", step " << step;
    m.backward();
    dense.step(mesh.data(), mesh.tensor_parallel().world(), {rates.dense, 0.0f});
    tables.step(mesh.tensor_parallel().world(), rates.tables);
    serial_dense.step(s.dense, g, rates.dense);
    serial_tables.step(s.tables, g, rates.tables);
  }
  // Dense: every replica's copy of every parameter.
  m.for_each_parameter([&](const std::string& name, auto& p) {
    const matrix change = p.value.local().template cast<double>() - initial.dense.at(name);
    EXPECT_LE(relative_error(change, s.dense.at(name) - initial.dense.at(name)), change_tolerance)
        << what << ": " << name;
  });
  // Tables: every row of every piece, the touched ones changed as the serial rows, the others as they
  // started, bit for bit; and row-wise Adagrad's accumulator of each row, zero where never touched.
  std::size_t k = 0;
  m.for_each_sparse_parameter([&](const std::string& name, nn::sparse_parameter<float>& p) {
    const auto table = static_cast<std::size_t>(p.table);
    const auto& start = initial.tables[table];
    const auto& expected = s.tables[table];
    const auto state = tables.state(k++);
    for (Eigen::Index i = 0; i < p.rows(); ++i) {
      const Eigen::Index row = p.first_row + i;
      const matrix mine = p.value().row(i).template cast<double>();
      const std::string where = what + ": " + name + ", row " + std::to_string(row);
      if (expected.row(row) == start.row(row)) EXPECT_EQ(mine, start.row(row)) << where << " was not touched";
      else
        EXPECT_LE(relative_error(mine - start.row(row), expected.row(row) - start.row(row)), change_tolerance) << where;
      if constexpr (requires { serial_tables.accumulators; }) {
        const double accumulator = serial_tables.accumulators[table](row);
        EXPECT_NEAR(state[static_cast<std::size_t>(i)], accumulator, change_tolerance * accumulator)
            << where << "'s accumulator";
      }
    }
  });
}

// Four steps on batches 0 to 3 (each a new one: a step that reads the last batch's gradients or skips
// this one's shows), on a table cut by rows and tables whole, sum and mean pooling, and a batch of 11
// that 2, 3 and 4 ranks do not divide: SGD with sparse SGD, and Adam with row-wise Adagrad.
TYPED_TEST(dlrm_model, steps_of_the_sharded_and_sparse_updates_equal_the_serial_steps) {
  TypeParam::run(
      [](communicator auto& world) {
        for (const auto how : {fused::pooling::sum, fused::pooling::mean}) {
          expect_steps_equal_serial(world, how, serial_sgd{optim::sgd{.weight_decay = 0.01f}}, serial_sparse_sgd{},
                                    {.dense = 0.5f, .tables = 2.0f});
          expect_steps_equal_serial(
              world, how,
              serial_adam(optim::adam{.beta1 = 0.8f, .beta2 = 0.95f, .epsilon = 1e-3f, .weight_decay = 0.01f}),
              serial_rowwise_adagrad(optim::rowwise_adagrad{.epsilon = 1e-3f}), {.dense = 0.01f, .tables = 0.05f});
        }
      },
      {1, 2, 3, 4});
}

}  // namespace
