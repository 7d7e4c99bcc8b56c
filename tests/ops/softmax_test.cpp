// Softmax over rows (ops/softmax.hpp), forward and backward, on every layout family and shapes that do
// not divide the grid, against serial Eigen; the backward against central finite differences of the
// distributed forward on a small case.
#include <gtest/gtest.h>

#include <Eigen/Core>

#include "ops/ops_testing.hpp"
#include "shardwise/ops/softmax.hpp"
#include "support/backends.hpp"

namespace {

using namespace shardwise;
using namespace shardwise::ops_testing;
using column = Eigen::VectorXd;

template <class Backend>
class softmax_test : public ::testing::Test {};
TYPED_TEST_SUITE(softmax_test, shardwise::testing::backends);

matrix serial_softmax(const matrix& x) {
  const column maxima = x.rowwise().maxCoeff();
  const matrix exponentials = (x.colwise() - maxima).array().exp().matrix();
  const column sums = exponentials.rowwise().sum();
  return (exponentials.array().colwise() / sums.array()).matrix();
}

// softmax_rows and its backward on every family, the logits drawn by logits(shape), against serial Eigen.
template <class Backend, class Logits>
void expect_serial_eigen(Logits logits) {
  Backend::run(
      [&](auto& world) {
        for_every_family(world, [&]<class Layout>(auto& mesh, const matrix_extents& shape) {
          SCOPED_TRACE(::testing::internal::GetTypeName<Layout>());
          const matrix x_whole = logits(shape);
          const matrix dy_whole = random_matrix(shape, 12);
          const matrix y_whole = serial_softmax(x_whole);
          const column dots = dy_whole.cwiseProduct(y_whole).rowwise().sum();

          const auto y = softmax_rows(distribute<Layout>(mesh, x_whole));
          expect_near(y, y_whole, 1e-12, "softmax");
          expect_near(softmax_rows_backward(distribute<Layout>(mesh, dy_whole), y),
                      (y_whole.array() * (dy_whole.colwise() - dots).array()).matrix(), 1e-12, "softmax backward");
        });
      },
      rank_counts);
}

TYPED_TEST(softmax_test, forward_and_backward_match_serial_eigen) {
  expect_serial_eigen<TypeParam>([](const matrix_extents& shape) { return matrix(3 * random_matrix(shape, 11)); });
}

// Every other column 800 above the rest: a row spans more than exp's range (709 in double), so only a
// shift by the row's maximum over all its ranks keeps every exponential finite. Any shift the ranks agree
// on gives the same softmax for narrower rows.
TYPED_TEST(softmax_test, rows_wider_than_the_range_of_exp) {
  expect_serial_eigen<TypeParam>([](const matrix_extents& shape) {
    matrix x = 3 * random_matrix(shape, 11);
    for (Eigen::Index j = 0; j < x.cols(); j += 2) x.col(j).array() += 800;
    return x;
  });
}

TYPED_TEST(softmax_test, backward_matches_finite_differences) {
  TypeParam::run(
      [](auto& world) {
        for_column_cutting_layouts(world, [&]<class Layout>(auto& mesh) {
          SCOPED_TRACE(::testing::internal::GetTypeName<Layout>());
          const matrix x_whole = random_matrix({3, 5}, 21);
          const matrix weights = random_matrix({3, 5}, 22);  // dL/dy of L = Σ weights ∘ y
          const auto y = softmax_rows(distribute<Layout>(mesh, x_whole));
          const matrix differences = finite_differences(x_whole, [&](const matrix& at) {
            return weighted_sum(softmax_rows(distribute<Layout>(mesh, at)), weights);
          });
          expect_near(softmax_rows_backward(distribute<Layout>(mesh, weights), y), differences, 1e-7,
                      "softmax backward against differences");
        });
      },
      rank_counts);
}

}  // namespace
