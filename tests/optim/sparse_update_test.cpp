// Sparse optimizers for embedding tables (optim/sparse_update.hpp) against a dense reference written here
// with Eigen on the whole table: a batch's lookups, repeated indices among them, are accumulated into
// each touched row first (nn::sparse_rows, in the order first touched); then sparse SGD and row-wise
// Adagrad change exactly the touched rows as the dense update of the summed gradient does (float and
// double, several steps, so Adagrad's state carries over), and leave every other row and its state
// as they were, bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "shardwise/nn/sparse_parameter.hpp"
#include "shardwise/optim/rowwise_adagrad.hpp"
#include "shardwise/optim/sparse_sgd.hpp"
#include "shardwise/optim/sparse_update.hpp"
#include "support/messages.hpp"

namespace {

using namespace shardwise;
using shardwise::testing::message_of;

template <class T>
using matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

constexpr std::int64_t rows = 40;
constexpr int dimension = 6;

// Lookup i of step `step`: rows 0-9 often (repeats), never rows 30-39.
std::int64_t lookup(int step, int i) { return (i * 7 + step * 3) % (i % 3 == 0 ? 10 : 30); }
template <class T>
T gradient_at(int step, int i, int column) {
  return static_cast<T>((step * 17 + i * 5 + column * 3) % 23) / T(11) - T(1);
}

// A model of one table, as a sparse update takes it.
template <class T>
struct one_table {
  nn::sparse_parameter<T> table;
  template <class F>
  void for_each_sparse_parameter(F&& f) {
    f("table", table);
  }
};

template <class T>
matrix<T> initial() {
  matrix<T> m(rows, dimension);
  for (Eigen::Index i = 0; i < rows; ++i)
    for (Eigen::Index j = 0; j < dimension; ++j) m(i, j) = static_cast<T>((i * 13 + j * 7) % 17) / T(9) - T(0.9);
  return m;
}

template <class T, class Optimizer, class Dense>
void expect_sparse_equals_dense(Optimizer optimizer, T learning_rate, Dense&& dense_step) {
  const double tolerance = std::is_same_v<T, float> ? 1e-6 : 1e-14;
  one_table<T> model{nn::sparse_parameter<T>(0, rows, 0, rows, dimension)};
  model.table.value() = initial<T>();
  optim::sparse_update<Optimizer, T> update(model, optimizer);
  matrix<T> reference = initial<T>();
  std::vector<T> state(static_cast<std::size_t>(rows), T(0));
  for (int step = 0; step < 5; ++step) {
    const matrix<T> before = model.table.value();
    const std::vector<T> state_before(update.state(0).begin(), update.state(0).end());
    // The batch: 25 lookups, accumulated row by row.
    matrix<T> summed = matrix<T>::Zero(rows, dimension);
    for (int i = 0; i < 25; ++i) {
      T* row = model.table.gradient.row(lookup(step, i));
      for (int j = 0; j < dimension; ++j) {
        row[j] += gradient_at<T>(step, i, j);
        summed(lookup(step, i), j) += gradient_at<T>(step, i, j);
      }
    }
    EXPECT_LT(model.table.gradient.touched().size(), 25U) << "the batch repeats rows; each is touched once";
    dense_step(reference, state, summed, learning_rate);
    update.step(learning_rate);
    EXPECT_TRUE(model.table.gradient.touched().empty()) << "step() clears the gradient";
    for (Eigen::Index i = 0; i < rows; ++i) {
      const bool touched = !summed.row(i).isZero(0);
      if (touched) {
        EXPECT_LE((model.table.value().row(i) - reference.row(i)).norm(), tolerance * (1 + reference.row(i).norm()))
            << "step " << step << ", row " << i;
      } else {
        EXPECT_EQ(std::memcmp(model.table.value().row(i).data(), before.row(i).data(), dimension * sizeof(T)), 0)
            << "step " << step << ": untouched row " << i << " changed";
        if (optim::state_count<Optimizer> > 0) {
          EXPECT_EQ(update.state(0)[static_cast<std::size_t>(i)], state_before[static_cast<std::size_t>(i)])
              << "untouched row " << i << "'s state changed";
        }
      }
    }
    for (Eigen::Index i = 30; i < rows; ++i) EXPECT_EQ(model.table.value().row(i), initial<T>().row(i));
  }
}

template <class T>
void dense_sgd(matrix<T>& w, std::vector<T>&, const matrix<T>& g, T lr) {
  w -= lr * g;
}

// Row-wise Adagrad on every row: rows without gradient keep their values and state (adding zero).
template <class T>
void dense_rowwise_adagrad(matrix<T>& w, std::vector<T>& state, const matrix<T>& g, T lr) {
  for (Eigen::Index i = 0; i < w.rows(); ++i) {
    if (g.row(i).isZero(0)) continue;
    state[static_cast<std::size_t>(i)] += g.row(i).squaredNorm() / static_cast<T>(g.cols());
    w.row(i) -= lr * g.row(i) / (std::sqrt(state[static_cast<std::size_t>(i)]) + static_cast<T>(1e-8f));
  }
}

TEST(sparse_update, sparse_sgd_equals_dense_sgd_on_the_touched_rows) {
  expect_sparse_equals_dense<float>(optim::sparse_sgd{}, 0.1f, dense_sgd<float>);
  expect_sparse_equals_dense<double>(optim::sparse_sgd{}, 0.1, dense_sgd<double>);
}

TEST(sparse_update, rowwise_adagrad_equals_the_dense_update_on_the_touched_rows) {
  expect_sparse_equals_dense<float>(optim::rowwise_adagrad{}, 0.05f, dense_rowwise_adagrad<float>);
  expect_sparse_equals_dense<double>(optim::rowwise_adagrad{}, 0.05, dense_rowwise_adagrad<double>);
}

TEST(sparse_update, a_table_it_does_not_have_is_an_error_naming_it) {
  one_table<float> model{nn::sparse_parameter<float>(0, rows, 0, rows, dimension)};
  const optim::sparse_update<optim::sparse_sgd, float> update(model);
  EXPECT_EQ(update.name(0), "table");
  EXPECT_EQ(message_of<argument_error>([&] { (void)update.name(1); }),
            "[no rank] optim::sparse_update::name: table 1 is out of range: there are 1, numbered from 0");
  EXPECT_EQ(message_of<argument_error>([&] { (void)update.state(3); }),
            "[no rank] optim::sparse_update::state: table 3 is out of range: there are 1, numbered from 0");
}

TEST(sparse_rows, keeps_each_touched_row_once_in_the_order_first_touched) {
  nn::sparse_rows<double> g(10, 2);
  for (const std::int64_t index : {4, 1, 4, 9, 1, 4}) g.row(index)[0] += 1;
  EXPECT_EQ(std::vector<std::int64_t>(g.touched().begin(), g.touched().end()), (std::vector<std::int64_t>{4, 1, 9}));
  EXPECT_EQ(g.values(0)[0], 3.0);
  EXPECT_EQ(g.values(1)[0], 2.0);
  EXPECT_EQ(g.find(7), nullptr);
  g.clear();
  EXPECT_TRUE(g.touched().empty());
  EXPECT_EQ(g.row(4)[0], 0.0) << "a row touched again after clear() starts from zero";
}

}  // namespace
