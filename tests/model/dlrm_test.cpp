// model::dlrm on threads, MPI and simulated GPUs against a serial DLRM written with Eigen on the whole
// batch (dlrm_serial.hpp, itself checked against central differences in dlrm_serial_test.cpp): the
// loss, the dense parameters' gradients (averaged over the replicas, as the update averages them) and
// the tables' gradients agree within 1e-12 in double, with a table cut by rows and tables cut by
// tables, sum and mean pooling, and a batch that does not divide over the ranks; the fused and unfused
// embedding paths give the same bits; and steps of sharded_update + sparse_update lower the loss and
// equal the same optimizers' steps of the serial DLRM (dlrm_training_test.cpp, compiled apart:
// dlrm_checks.hpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "model/dlrm_checks.hpp"
#include "model/dlrm_serial.hpp"
#include "shardwise/data/dlrm_generator.hpp"
#include "shardwise/model/dlrm.hpp"
#include "support/backends.hpp"
#include "support/messages.hpp"
#include "support/relative_error.hpp"

namespace {

using namespace shardwise;
using namespace shardwise::testing;

template <class Comm>
void expect_model_equals_serial(Comm& world, fused::pooling how) {
  const auto c = config_with(how);
  data_parallel_mesh mesh(world, world.size(), {1});
  const auto with = [&](fused::path path) {
    fused::embedding_options options;
    options.choice = options.backward_choice = path;
    options.slice_rows = 2;
    return std::make_unique<model::dlrm<double, Comm>>(mesh, c, batch, options);
  };
  auto fused_model = with(fused::path::fused), unfused_model = with(fused::path::baseline);
  auto& m = *fused_model;
  const auto gen = generator();
  const auto tables = all_tables();
  const auto whole = gen.batch<double>(data::dlrm_stream::training, 7, batch, 0, batch, tables);
  const auto mine = gen.batch<double>(data::dlrm_stream::training, 7, batch, m.first_row(), m.rows(), m.input_tables());
  auto s = serial_of(m, c);
  serial_dlrm::gradients g;
  const double expected = s.loss(whole, &g);
  const double loss = m.forward(mine);
  const double unfused_loss = unfused_model->forward(mine);
  const std::string what =
      std::string(how == fused::pooling::sum ? "sum" : "mean") + ", rank " + std::to_string(world.rank());
  EXPECT_NEAR(loss, expected, 1e-12 * std::abs(expected)) << what;
  EXPECT_EQ(std::memcmp(&loss, &unfused_loss, sizeof loss), 0) << what << ": fused and unfused losses differ";
  m.backward();
  unfused_model->backward();
  // Dense: each replica's gradient is P times its share, the replicas' average the whole gradient.
  std::vector<matrix> unfused_dense;
  unfused_model->for_each_parameter([&](const std::string&, auto& p) { unfused_dense.push_back(p.gradient.local()); });
  std::size_t k = 0;
  m.for_each_parameter([&](const std::string& name, auto& p) {
    matrix mine_gradient = p.gradient.local();
    EXPECT_EQ(mine_gradient, unfused_dense[k++]) << what << ": " << name << " differs between the paths";
    mesh.data().all_reduce(std::span<double>(mine_gradient.data(), static_cast<std::size_t>(mine_gradient.size())));
    EXPECT_LE(relative_error(mine_gradient / static_cast<double>(world.size()), g.dense.at(name)), 1e-12)
        << what << ": " << name;
  });
  // Tables: each piece's touched rows.
  std::vector<nn::sparse_parameter<double>*> unfused_pieces;
  unfused_model->for_each_sparse_parameter(
      [&](const std::string&, nn::sparse_parameter<double>& p) { unfused_pieces.push_back(&p); });
  k = 0;
  m.for_each_sparse_parameter([&](const std::string& name, nn::sparse_parameter<double>& p) {
    const auto& other = unfused_pieces[k++]->gradient;
    matrix dense = matrix::Zero(p.rows(), p.dimension());
    for (std::size_t i = 0; i < p.gradient.touched().size(); ++i) {
      EXPECT_EQ(p.gradient.touched()[i], other.touched()[i]) << what << ": " << name;
      EXPECT_EQ(std::memcmp(p.gradient.values(i).data(), other.values(i).data(), p.gradient.values(i).size_bytes()), 0)
          << what << ": " << name;
      for (Eigen::Index j = 0; j < dense.cols(); ++j)
        dense(p.gradient.touched()[i], j) = p.gradient.values(i)[static_cast<std::size_t>(j)];
    }
    EXPECT_LE(relative_error(dense, g.tables[static_cast<std::size_t>(p.table)].middleRows(p.first_row, p.rows())),
              1e-12)
        << what << ": " << name;
  });
}

TYPED_TEST(dlrm_model, forward_and_backward_equal_the_serial_model) {
  TypeParam::run(
      [](communicator auto& world) {
        for (const auto how : {fused::pooling::sum, fused::pooling::mean}) expect_model_equals_serial(world, how);
      },
      {1, 2, 3, 4});
}

// A configuration the model cannot be built from is refused naming what is wrong, and with what value.
TYPED_TEST(dlrm_model, a_configuration_it_cannot_build_is_refused_naming_what_is_wrong) {
  TypeParam::run(
      [](communicator auto& world) {
        data_parallel_mesh mesh(world, world.size(), {1});
        const auto expect_refused = [&](model::dlrm_config c, const std::string& words) {
          const auto message = message_of<argument_error>(
              [&] { const model::dlrm<double, std::remove_cvref_t<decltype(world)>> m(mesh, c, batch); });
          EXPECT_NE(message.find("model::dlrm: " + words), std::string::npos) << message;
        };
        auto c = config_with(fused::pooling::sum);
        c.top = {5, 2};
        expect_refused(c, "the top MLP must end in one logit; its last layer has 2 outputs");
        c = config_with(fused::pooling::sum);
        c.dense_features = 0;
        expect_refused(c, "needs dense features; got 0");
        c = config_with(fused::pooling::sum);
        c.tables.clear();
        expect_refused(c, "needs at least one table");
        c = config_with(fused::pooling::sum);
        c.tables[1].dimension = 3;
        expect_refused(c, "every table's width must be the bottom MLP's output width 4");
      },
      {1, 4});
}

}  // namespace
