// Checkpoints of a DLRM's training state: the dense MLPs' sharded Adam and the tables' row-wise Adagrad
// saved into one checkpoint. Loaded on the same ranks, the next step is the uninterrupted run's, bit for
// bit; loaded on fewer ranks with every table cut by rows, each table row, its accumulator and every
// dense weight land where the new pieces hold them, bit for bit, and the next loss agrees within float
// rounding; the weights alone load likewise, with no optimizer state; a checkpoint of tables of other
// shapes, of another sparse optimizer, or loaded without the tables, is refused with what differs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "model/dlrm_checks.hpp"
#include "shardwise/data/dlrm_generator.hpp"
#include "shardwise/mesh/data_parallel_mesh.hpp"
#include "shardwise/model/dlrm.hpp"
#include "shardwise/optim/adam.hpp"
#include "shardwise/optim/model_checkpoint.hpp"
#include "shardwise/optim/rowwise_adagrad.hpp"
#include "shardwise/optim/sharded.hpp"
#include "shardwise/optim/sparse_sgd.hpp"
#include "shardwise/optim/sparse_update.hpp"
#include "support/backends.hpp"
#include "support/files.hpp"

namespace {

using namespace shardwise;
using namespace shardwise::testing;
namespace fs = std::filesystem;

template <class Backend>
class dlrm_checkpoint : public ::testing::Test {};
TYPED_TEST_SUITE(dlrm_checkpoint, shardwise::testing::backends);

// Every table cut by rows: pieces that meet the table-wise ones of config_with() only in part.
model::dlrm_config every_table_by_rows(model::dlrm_config c) {
  for (auto& table : c.tables) table.sharding = fused::table_sharding::row_wise;
  return c;
}

// A DLRM and its two updates on `world` (every rank a replica), trained a step at a time.
template <class Comm>
struct dlrm_training {
  data_parallel_mesh<Comm, 1> mesh;
  model::dlrm<float, Comm> model;
  optim::sharded_update<optim::adam> dense;
  optim::sparse_update<optim::rowwise_adagrad> tables;

  dlrm_training(Comm& world, const model::dlrm_config& c)
      : mesh(world, world.size(), {1}),
        model(mesh, c, batch),
        dense(model, mesh.data(), optim::adam{.epsilon = 1e-3f, .weight_decay = 0.01f}),
        tables(model) {}

  // The loss of step `step`'s batch (the step runs when `trains`).
  double step(int step, bool trains = true) {
    const auto b = generator().batch<float>(data::dlrm_stream::training, step * batch, batch, model.first_row(),
                                            model.rows(), model.input_tables());
    const double loss = model.forward(b);
    if (!trains) return loss;
    model.backward();
    dense.step(mesh.data(), mesh.tensor_parallel().world(), {0.01f, 0.0f});
    tables.step(mesh.tensor_parallel().world(), 0.05f);
    return loss;
  }

  // The whole state as every rank sees it: the dense weights (whole on every replica), and each table
  // and its accumulators assembled from the pieces (each held by one rank, so the sum is exact).
  std::map<std::string, std::vector<double>> state() {
    std::map<std::string, std::vector<double>> s;
    model.for_each_parameter([&](const std::string& name, auto& p) {
      const auto local = p.value.local();
      s[name].assign(local.data(), local.data() + local.size());
    });
    const auto& c = model.config();
    for (std::size_t t = 0; t < c.tables.size(); ++t) {
      const auto name = "embedding.tables." + std::to_string(t);
      s[name].assign(static_cast<std::size_t>(c.tables[t].rows * c.bottom.back()), 0.0);
      s[name + "/sum_of_mean_squares"].assign(static_cast<std::size_t>(c.tables[t].rows), 0.0);
    }
    for (std::size_t k = 0; k < tables.table_count(); ++k) {
      const auto& piece = tables.parameter(k);
      const auto width = static_cast<std::size_t>(piece.dimension());
      const auto first = static_cast<std::size_t>(piece.first_row);
      std::ranges::copy(piece.values(), s[tables.name(k)].begin() + static_cast<std::ptrdiff_t>(first * width));
      std::ranges::copy(tables.state(k),
                        s[tables.name(k) + "/sum_of_mean_squares"].begin() + static_cast<std::ptrdiff_t>(first));
    }
    for (auto& [name, values] : s)
      if (name.starts_with("embedding.")) mesh.data().all_reduce(std::span<double>(values));
    return s;
  }
};

template <class Comm>
dlrm_training(Comm&, const model::dlrm_config&) -> dlrm_training<Comm>;

void expect_same_state(const std::map<std::string, std::vector<double>>& found,
                       const std::map<std::string, std::vector<double>>& expected, const std::string& what) {
  ASSERT_EQ(found.size(), expected.size()) << what;
  for (const auto& [name, values] : expected) EXPECT_EQ(found.at(name), values) << what << ": " << name;
}

TYPED_TEST(dlrm_checkpoint, resumes_bitwise_on_the_same_ranks_and_loads_exactly_on_fewer) {
  TypeParam::run(
      [](communicator auto& world) {
        const fs::path folder = shardwise::testing::shared_folder(world, "dlrm-checkpoint");
        const auto c = config_with(fused::pooling::mean);
        std::map<std::string, std::vector<double>> saved, after;
        double next_loss = 0;
        {
          dlrm_training run(world, c);
          run.step(0);
          run.step(1);
          optim::save_model_checkpoint(folder, run.dense, run.tables, run.mesh.data(), world, {{"note", "two"}});
          saved = run.state();
          next_loss = run.step(2);
          after = run.state();
        }
        // The same ranks and sharding: the next step is the uninterrupted run's, bit for bit.
        {
          dlrm_training run(world, c);
          const auto metadata = optim::load_model_checkpoint(folder, run.dense, run.tables, world);
          EXPECT_EQ(metadata.at("note"), "two");
          EXPECT_EQ(run.dense.steps_done(), 2);
          expect_same_state(run.state(), saved, "loaded on the same ranks");
          EXPECT_EQ(run.step(2), next_loss);
          expect_same_state(run.state(), after, "resumed on the same ranks");
        }
        // One rank fewer (where there are two), every table cut by rows: the same values where the
        // new pieces hold them; the next loss within float rounding (another reduction order).
        const int fewer = std::max(1, world.size() - 1);
        auto part = world.split(world.rank() < fewer ? 0 : 1, world.rank());
        if (world.rank() < fewer) {
          dlrm_training run(part, every_table_by_rows(c));
          (void)optim::load_model_checkpoint(folder, run.dense, run.tables, part);
          expect_same_state(run.state(), saved, "loaded on " + std::to_string(fewer) + " ranks, cut by rows");
          EXPECT_NEAR(run.step(2, false), next_loss, 1e-6 * std::abs(next_loss));
        }
        world.barrier();
        if (world.rank() == 0) fs::remove_all(folder);
      },
      {1, 2, 3, 4});
}

// The weights alone (to evaluate, or to train on with fresh optimizers), loaded on one rank fewer with
// every table cut by rows: each dense weight and table row where the new pieces hold them, bit for bit;
// the tables' accumulators left as a fresh update made them (zero); the next loss within rounding.
TYPED_TEST(dlrm_checkpoint, the_weights_alone_load_on_fewer_ranks_with_the_tables_cut_otherwise) {
  TypeParam::run(
      [](communicator auto& world) {
        const fs::path folder = shardwise::testing::shared_folder(world, "dlrm-checkpoint-weights");
        const auto c = config_with(fused::pooling::mean);
        std::map<std::string, std::vector<double>> saved;
        double next_loss = 0;
        {
          dlrm_training run(world, c);
          run.step(0);
          run.step(1);
          optim::save_model_checkpoint(folder, run.dense, run.tables, run.mesh.data(), world);
          saved = run.state();
          next_loss = run.step(2, false);
        }
        const int fewer = std::max(1, world.size() - 1);
        auto part = world.split(world.rank() < fewer ? 0 : 1, world.rank());
        if (world.rank() < fewer) {
          dlrm_training run(part, every_table_by_rows(c));
          const auto metadata = optim::load_model_weights(folder, run.model, part);
          EXPECT_EQ(metadata.at("steps"), "2");
          EXPECT_EQ(run.dense.steps_done(), 0);  // the update is not the checkpoint's
          for (const auto& [name, values] : run.state()) {
            if (name.ends_with("/sum_of_mean_squares"))
              EXPECT_TRUE(std::ranges::all_of(values, [](double v) { return v == 0; })) << name;
            else
              EXPECT_EQ(values, saved.at(name)) << name;
          }
          EXPECT_NEAR(run.step(2, false), next_loss, 1e-6 * std::abs(next_loss));
        }
        world.barrier();
        if (world.rank() == 0) fs::remove_all(folder);
      },
      {1, 2, 3});
}

TYPED_TEST(dlrm_checkpoint, refuses_other_tables_another_sparse_optimizer_and_a_load_without_the_tables) {
  TypeParam::run(
      [](communicator auto& world) {
        using Comm = std::remove_cvref_t<decltype(world)>;
        const fs::path folder = shardwise::testing::shared_folder(world, "dlrm-checkpoint-refused");
        const auto c = config_with(fused::pooling::sum);
        dlrm_training run(world, c);
        run.step(0);
        optim::save_model_checkpoint(folder, run.dense, run.tables, run.mesh.data(), world);

        const auto expect_error = [&](auto&& load, const std::string& words) {
          try {
            load();
            ADD_FAILURE() << "loaded; expected an error saying \"" << words << "\"";
          } catch (const optim::checkpoint_error& e) {
            EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
          }
        };
        {
          auto longer = c;
          longer.tables[1].rows = 8;
          dlrm_training other(world, longer);
          expect_error([&] { (void)optim::load_model_checkpoint(folder, other.dense, other.tables, world); },
                       "table \"embedding.tables.1\" is 7x4 there and 8x4 in this model");
        }
        {
          model::dlrm<float, Comm> same(run.mesh, c, batch);
          optim::sharded_update<optim::adam> dense(same, run.mesh.data(), optim::adam{});
          optim::sparse_update<optim::sparse_sgd> tables(same);
          expect_error(
              [&] { (void)optim::load_model_checkpoint(folder, dense, tables, world); },
              "its tables' optimizer state is {sum_of_mean_squares} per row, this sparse optimizer keeps none");
          expect_error([&] { (void)optim::load_model_checkpoint(folder, dense, world); },
                       "it has 3 tables, this model 0");
        }
        world.barrier();
        if (world.rank() == 0) fs::remove_all(folder);
      },
      {1, 3});
}

}  // namespace
