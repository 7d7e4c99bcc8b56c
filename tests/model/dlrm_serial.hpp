#pragma once
// The serial DLRM the DLRM test checks model::dlrm against (dlrm_test.cpp): every parameter as a whole
// matrix, the whole batch at once, written here with Eigen; and the serial model of a distributed
// one's initial weights. Its own gradients are checked against central differences of its loss in
// dlrm_serial_test.cpp, once, apart from the backends' builds.
#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "shardwise/data/dlrm_generator.hpp"
#include "shardwise/model/dlrm.hpp"

namespace shardwise::testing {

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

inline std::vector<int> all_tables() { return {0, 1, 2}; }

}  // namespace shardwise::testing
