#pragma once
// The serial DLRM the DLRM test checks model::dlrm against (dlrm_test.cpp): every parameter as a whole
// matrix, the whole batch at once, written here with Eigen in double; the serial model of a distributed
// one's initial weights; and the optimizers' steps on it (dlrm_training_test.cpp). Its own gradients
// are checked against central differences of its loss in dlrm_serial_test.cpp, once, apart from the
// backends' builds.
#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "shardwise/data/dlrm_generator.hpp"
#include "shardwise/model/dlrm.hpp"
#include "shardwise/optim/adam.hpp"
#include "shardwise/optim/rowwise_adagrad.hpp"
#include "shardwise/optim/sgd.hpp"
#include "shardwise/optim/sparse_sgd.hpp"

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
    std::vector<std::set<Eigen::Index>> touched;  // per table, the rows the batch looked up
  };

  static matrix relu(const matrix& m) { return m.cwiseMax(0.0); }

  // The mean loss over the batch, and its gradients when asked. A batch of floats (a float model's) is
  // read as its values in double.
  template <class Element>
  double loss(const model::dlrm_batch<Element>& b, gradients* g) const {
    const auto B = static_cast<Eigen::Index>(b.labels.size());
    const auto F = static_cast<Eigen::Index>(b.dense.size()) / B;
    const matrix x0 =
        Eigen::Map<const Eigen::Matrix<Element, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(b.dense.data(), B, F)
            .template cast<double>();
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
      const double v = logit(s, 0), y = static_cast<double>(b.labels[static_cast<std::size_t>(s)]);
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
    g->touched.clear();
    for (std::size_t t = 0; t < tables.size(); ++t) {
      auto& table = g->tables.emplace_back(matrix::Zero(tables[t].rows(), D));
      auto& touched = g->touched.emplace_back();
      const auto& bags = b.sparse[t];
      for (Eigen::Index s = 0; s < B; ++s) {
        const auto begin = bags.offsets[static_cast<std::size_t>(s)],
                   end = bags.offsets[static_cast<std::size_t>(s) + 1];
        const double divisor = pooling == fused::pooling::mean && end > begin ? static_cast<double>(end - begin) : 1.0;
        for (auto i = begin; i < end; ++i) {
          table.row(bags.indices[static_cast<std::size_t>(i)]) += dvec[t + 1].row(s) / divisor;
          touched.insert(bags.indices[static_cast<std::size_t>(i)]);
        }
      }
    }
    return sum / static_cast<double>(B);
  }
};

// The serial model of a distributed one's initial weights, in double: a float model's weights exactly.
template <class T, class Comm>
serial_dlrm serial_of(model::dlrm<T, Comm>& model, const model::dlrm_config& c) {
  serial_dlrm s;
  s.pooling = c.pooling;
  s.bottom_layers = static_cast<int>(c.bottom.size());
  s.top_layers = static_cast<int>(c.top.size());
  model.for_each_parameter(
      [&](const std::string& name, auto& p) { s.dense[name] = p.value.local().template cast<double>(); });
  for (int t = 0; t < static_cast<int>(c.tables.size()); ++t) {
    const auto rows = c.tables[static_cast<std::size_t>(t)].rows;
    auto& table = s.tables.emplace_back(rows, c.bottom.back());
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < c.bottom.back(); ++j)
        table(i, j) = static_cast<double>(fused::initial_embedding<T>(c.seed * 1000 + 100, t, rows, i, j));
  }
  return s;
}

// The optimizers' steps on the serial model, each written as its header states it, from the
// hyper-parameters the distributed update is given. Dense updates change every element of every
// parameter from the mean loss's gradient (what the replicas' average is); sparse updates change the
// rows the batch looked up, from each row's gradient summed over its lookups, and no other row.

// w ← w − lr · (g + λ w)   (optim/sgd.hpp)
struct serial_sgd {
  optim::sgd hyper_parameters;

  void step(std::map<std::string, matrix>& weights, const serial_dlrm::gradients& g, double learning_rate) const {
    const double decay = hyper_parameters.weight_decay;
    for (auto& [name, w] : weights) w -= learning_rate * (g.dense.at(name) + decay * w);
  }
};

// At step t (from 1): g' = g + λ w;  m ← β1 m + (1 − β1) g';  v ← β2 v + (1 − β2) g'²;
// w ← w − lr · m̂ / (√v̂ + ε), m̂ = m / (1 − β1^t), v̂ = v / (1 − β2^t)   (optim/adam.hpp)
struct serial_adam {
  optim::adam hyper_parameters;
  long steps = 0;
  std::map<std::string, matrix> first_moment, second_moment;

  explicit serial_adam(optim::adam o) : hyper_parameters(o) {}

  void step(std::map<std::string, matrix>& weights, const serial_dlrm::gradients& g, double learning_rate) {
    ++steps;
    const double beta1 = hyper_parameters.beta1, beta2 = hyper_parameters.beta2;
    const double epsilon = hyper_parameters.epsilon, decay = hyper_parameters.weight_decay;
    for (auto& [name, w] : weights) {
      const matrix gradient = g.dense.at(name) + decay * w;
      auto& m = first_moment.try_emplace(name, matrix::Zero(w.rows(), w.cols())).first->second;
      auto& v = second_moment.try_emplace(name, matrix::Zero(w.rows(), w.cols())).first->second;
      m = beta1 * m + (1 - beta1) * gradient;
      v = beta2 * v + (1 - beta2) * gradient.cwiseAbs2();
      const matrix m_hat = m / (1 - std::pow(beta1, static_cast<double>(steps)));
      const matrix v_hat = v / (1 - std::pow(beta2, static_cast<double>(steps)));
      w.array() -= learning_rate * m_hat.array() / (v_hat.array().sqrt() + epsilon);
    }
  }
};

// Each touched row w ← w − lr · g   (optim/sparse_sgd.hpp)
struct serial_sparse_sgd {
  optim::sparse_sgd hyper_parameters;

  void step(std::vector<matrix>& tables, const serial_dlrm::gradients& g, double learning_rate) const {
    for (std::size_t t = 0; t < tables.size(); ++t)
      for (const auto row : g.touched[t]) tables[t].row(row) -= learning_rate * g.tables[t].row(row);
  }
};

// Each touched row, of D elements: G ← G + (Σ g²) / D;  w ← w − lr · g / (√G + ε)
// (optim/rowwise_adagrad.hpp), G one accumulator per table row, zero at the start.
struct serial_rowwise_adagrad {
  optim::rowwise_adagrad hyper_parameters;
  std::vector<Eigen::VectorXd> accumulators;  // per table

  explicit serial_rowwise_adagrad(optim::rowwise_adagrad o) : hyper_parameters(o) {}

  void step(std::vector<matrix>& tables, const serial_dlrm::gradients& g, double learning_rate) {
    const double epsilon = hyper_parameters.epsilon;
    accumulators.resize(tables.size());
    for (std::size_t t = 0; t < tables.size(); ++t) {
      auto& G = accumulators[t];
      if (G.size() == 0) G = Eigen::VectorXd::Zero(tables[t].rows());
      for (const auto row : g.touched[t]) {
        const auto gradient = g.tables[t].row(row);
        G(row) += gradient.squaredNorm() / static_cast<double>(gradient.size());
        tables[t].row(row) -= learning_rate / (std::sqrt(G(row)) + epsilon) * gradient;
      }
    }
  }
};

inline std::vector<int> all_tables() { return {0, 1, 2}; }

}  // namespace shardwise::testing
