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

TYPED_TEST(softmax_test, forward_and_backward_match_serial_eigen) {
  TypeParam::run(
      [](auto& world) {
        for_every_family(world, [&]<class Layout>(auto& mesh, const matrix_extents& shape) {
          SCOPED_TRACE(::testing::internal::GetTypeName<Layout>());
          const matrix x_whole = 3 * random_matrix(shape, 11);
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
