// model::dlrm on threads, MPI and simulated GPUs against a serial DLRM written here with Eigen on the
// whole batch: the loss, the dense parameters' gradients (averaged over the replicas, as the update
// averages them) and the tables' gradients agree within 1e-12 in double, with a table cut by rows and
// tables cut by tables, sum and mean pooling, and a batch that does not divide over the ranks; the
// serial model's own gradients agree with central differences of its loss; the fused and unfused
// embedding paths give the same bits; and steps of sharded_update + sparse_update lower the loss
// (dlrm_training_test.cpp, compiled apart: dlrm_checks.hpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "model/dlrm_checks.hpp"
#include "shardwise/data/dlrm_generator.hpp"
#include "shardwise/model/dlrm.hpp"
#include "support/backends.hpp"

namespace {

using namespace shardwise;
using namespace shardwise::testing;
using matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// The serial DLRM: every parameter as a whole matrix, the whole batch at once.
struct serial_dlrm {
  std::map<std::string, matrix> dense;  // by the model's names
  std::vector<matrix> tables;
  int bottom_layers = 0, top_layers = 0;
  fused::pooling pooling = fused::pooling::sum;

  struct gradients {
    std::map<std::string, matrix> dense;
    std::vector<matrix> tables;
  };

  static matrix relu(const matrix& m) { return m.cwiseMax(0.0); }

  // The mean loss over the batch, and its gradients when asked.
  double loss(const model::dlrm_batch<double>& b, gradients* g) const {
    const auto B = static_cast<Eigen::Index>(b.labels.size());
    const auto F = static_cast<Eigen::Index>(b.dense.size()) / B;
    const matrix x0 = Eigen::Map<const matrix>(b.dense.data(), B, F);
    // Bottom MLP, ReLU after every layer.
    std::vector<matrix> bottom_in{x0}, bottom_pre;
    for (int l = 0; l < bottom_layers; ++l) {
      const auto& w = dense.at("bottom." + std::to_string(l) + ".weight");
      const auto& bias = dense.at("bottom." + std::to_string(l) + ".bias");
      bottom_pre.push_back((bottom_in.back() * w).rowwise() + bias.row(0));
      bottom_in.push_back(relu(bottom_pre.back()));
    }
    const matrix& x = bottom_in.back();
    const Eigen::Index D = x.cols();
    const auto T = static_cast<Eigen::Index>(tables.size());
    // Embeddings.
    std::vector<matrix> e(tables.size(), matrix::Zero(B, D));
    for (std::size_t t = 0; t < tables.size(); ++t)
      for (Eigen::Index s = 0; s < B; ++s) {
        const auto& bags = b.sparse[t];
        const auto begin = bags.offsets[static_cast<std::size_t>(s)],
                   end = bags.offsets[static_cast<std::size_t>(s) + 1];
        for (auto i = begin; i < end; ++i) e[t].row(s) += tables[t].row(bags.indices[static_cast<std::size_t>(i)]);
        if (pooling == fused::pooling::mean && end > begin) e[t].row(s) /= static_cast<double>(end - begin);
      }
    const auto vec = [&](Eigen::Index i) -> const matrix& { return i == 0 ? x : e[static_cast<std::size_t>(i - 1)]; };
    const Eigen::Index pairs = (T + 1) * T / 2;
    matrix z(B, D + pairs);
    z.leftCols(D) = x;
    for (Eigen::Index s = 0; s < B; ++s) {
      Eigen::Index at = D;
      for (Eigen::Index i = 1; i <= T; ++i)
        for (Eigen::Index j = 0; j < i; ++j) z(s, at++) = vec(i).row(s).dot(vec(j).row(s));
    }
    // Top MLP, ReLU after every layer but the last.
    std::vector<matrix> top_in{z}, top_pre;
    for (int l = 0; l < top_layers; ++l) {
      const auto& w = dense.at("top." + std::to_string(l) + ".weight");
      const auto& bias = dense.at("top." + std::to_string(l) + ".bias");
      top_pre.push_back((top_in.back() * w).rowwise() + bias.row(0));
      top_in.push_back(l + 1 < top_layers ? relu(top_pre.back()) : top_pre.back());
    }
    const matrix& logit = top_in.back();
    double sum = 0;
    matrix dlogit(B, 1);
    for (Eigen::Index s = 0; s < B; ++s) {
      const double v = logit(s, 0), y = b.labels[static_cast<std::size_t>(s)];
      sum += std::max(v, 0.0) - v * y + std::log1p(std::exp(-std::abs(v)));
      dlogit(s, 0) = (1 / (1 + std::exp(-v)) - y) / static_cast<double>(B);
    }
    if (g == nullptr) return sum / static_cast<double>(B);
    // Backward.
    matrix d = dlogit;
    for (int l = top_layers - 1; l >= 0; --l) {
      if (l + 1 < top_layers)
        d = d.cwiseProduct((top_pre[static_cast<std::size_t>(l)].array() > 0).cast<double>().matrix());
      const auto name = "top." + std::to_string(l);
      g->dense[name + ".weight"] = top_in[static_cast<std::size_t>(l)].transpose() * d;
      g->dense[name + ".bias"] = d.colwise().sum();
      d = matrix(d * dense.at(name + ".weight").transpose());
    }
    std::vector<matrix> dvec(static_cast<std::size_t>(T) + 1, matrix::Zero(B, D));
    dvec[0] = d.leftCols(D);
    for (Eigen::Index s = 0; s < B; ++s) {
      Eigen::Index at = D;
      for (Eigen::Index i = 1; i <= T; ++i)
        for (Eigen::Index j = 0; j < i; ++j, ++at) {
          dvec[static_cast<std::size_t>(i)].row(s) += d(s, at) * vec(j).row(s);
          dvec[static_cast<std::size_t>(j)].row(s) += d(s, at) * vec(i).row(s);
        }
    }
    d = dvec[0];
    for (int l = bottom_layers - 1; l >= 0; --l) {
      d = d.cwiseProduct((bottom_pre[static_cast<std::size_t>(l)].array() > 0).cast<double>().matrix());
      const auto name = "bottom." + std::to_string(l);
      g->dense[name + ".weight"] = bottom_in[static_cast<std::size_t>(l)].transpose() * d;
      g->dense[name + ".bias"] = d.colwise().sum();
      d = matrix(d * dense.at(name + ".weight").transpose());
    }
    g->tables.clear();
    for (std::size_t t = 0; t < tables.size(); ++t) {
      auto& table = g->tables.emplace_back(matrix::Zero(tables[t].rows(), D));
      const auto& bags = b.sparse[t];
      for (Eigen::Index s = 0; s < B; ++s) {
        const auto begin = bags.offsets[static_cast<std::size_t>(s)],
                   end = bags.offsets[static_cast<std::size_t>(s) + 1];
        const double divisor = pooling == fused::pooling::mean && end > begin ? static_cast<double>(end - begin) : 1.0;
        for (auto i = begin; i < end; ++i)
          table.row(bags.indices[static_cast<std::size_t>(i)]) += dvec[t + 1].row(s) / divisor;
      }
    }
    return sum / static_cast<double>(B);
  }
};

double relative(const matrix& a, const matrix& b) { return (a - b).norm() / std::max(1e-300, b.norm()); }

template <class Model>
serial_dlrm serial_of(Model& model, const model::dlrm_config& c) {
  serial_dlrm s;
  s.pooling = c.pooling;
  s.bottom_layers = static_cast<int>(c.bottom.size());
  s.top_layers = static_cast<int>(c.top.size());
  model.for_each_parameter([&](const std::string& name, auto& p) { s.dense[name] = p.value.local(); });
  for (int t = 0; t < static_cast<int>(c.tables.size()); ++t) {
    const auto rows = c.tables[static_cast<std::size_t>(t)].rows;
    auto& table = s.tables.emplace_back(rows, c.bottom.back());
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < c.bottom.back(); ++j)
        table(i, j) = fused::initial_embedding<double>(c.seed * 1000 + 100, t, rows, i, j);
  }
  return s;
}

std::vector<int> all_tables() { return {0, 1, 2}; }

TEST(dlrm_serial, gradients_agree_with_central_differences) {
  threads::run(1, [](threads::communicator& comm) {
    const auto c = config_with(fused::pooling::mean);
    data_parallel_mesh mesh(comm, 1, {1});
    model::dlrm<double, threads::communicator> distributed(mesh, c, batch);
    auto s = serial_of(distributed, c);
    const auto tables = all_tables();
    const auto b = generator().batch<double>(data::dlrm_stream::training, 0, batch, 0, batch, tables);
    serial_dlrm::gradients g;
    (void)s.loss(b, &g);
    const double h = 1e-6;
    const auto central = [&](double& x) {
      const double kept = x;
      x = kept + h;
      const double up = s.loss(b, nullptr);
      x = kept - h;
      const double down = s.loss(b, nullptr);
      x = kept;
      return (up - down) / (2 * h);
    };
    for (const auto* name : {"bottom.0.weight", "bottom.1.bias", "top.0.weight", "top.1.weight", "top.1.bias"})
      for (const Eigen::Index i : {0, 1}) {
        auto& x = s.dense[name](i % s.dense[name].rows(), 0);
        EXPECT_NEAR(g.dense[name](i % s.dense[name].rows(), 0), central(x), 1e-6) << name;
      }
    for (std::size_t t = 0; t < s.tables.size(); ++t) {
      const auto row = b.sparse[t].indices.empty() ? 0 : b.sparse[t].indices.front();
      EXPECT_NEAR(g.tables[t](row, 1), central(s.tables[t](row, 1)), 1e-6) << "table " << t;
    }
  });
}

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
    EXPECT_LE(relative(mine_gradient / static_cast<double>(world.size()), g.dense.at(name)), 1e-12)
        << what << ": " << name;
  });
  // Tables: each piece's touched rows.
  std::vector<nn::sparse_parameter<double>*> unfused_pieces;
  unfused_model->for_each_sparse_parameter(
      [&](const std::string&, nn::sparse_parameter<double>& p) { unfused_pieces.push_back(&p); });
  k = 0;
  m.for_each_sparse_parameter([&](const std::string& name, nn::sparse_parameter<double>& p) {
    const auto& other = unfused_pieces[k++]->gradient;
    matrix dense = matrix::Zero(p.value.rows(), p.value.cols());
    for (std::size_t i = 0; i < p.gradient.touched().size(); ++i) {
      EXPECT_EQ(p.gradient.touched()[i], other.touched()[i]) << what << ": " << name;
      EXPECT_EQ(std::memcmp(p.gradient.values(i).data(), other.values(i).data(), p.gradient.values(i).size_bytes()), 0)
          << what << ": " << name;
      for (Eigen::Index j = 0; j < dense.cols(); ++j)
        dense(p.gradient.touched()[i], j) = p.gradient.values(i)[static_cast<std::size_t>(j)];
    }
    EXPECT_LE(relative(dense, g.tables[static_cast<std::size_t>(p.table)].middleRows(p.first_row, p.value.rows())),
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

}  // namespace
