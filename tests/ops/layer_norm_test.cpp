// Layer normalisation over rows with gamma and beta (ops/layer_norm.hpp), forward and backward, on every
// layout family and shapes that do not divide the grid, against serial Eigen; dx, dgamma and dbeta
// against central finite differences of the distributed forward on a small case.
#include <gtest/gtest.h>

#include <Eigen/Core>

#include "ops/ops_testing.hpp"
#include "shardwise/layout/vector_layout.hpp"
#include "shardwise/ops/layer_norm.hpp"
#include "support/backends.hpp"

namespace {

using namespace shardwise;
using namespace shardwise::ops_testing;
using column = Eigen::VectorXd;

template <class Backend>
class layer_norm_test : public ::testing::Test {};
TYPED_TEST_SUITE(layer_norm_test, shardwise::testing::backends);

constexpr double epsilon = 1e-5;

// Layer norm on the full matrix, written out from its definition.
struct serial_layer_norm {
  matrix output, normalized;
  matrix input_gradient, gamma_gradient, beta_gradient;

  serial_layer_norm(const matrix& x, const matrix& gamma, const matrix& beta, const matrix& dy) {
    const auto n = static_cast<double>(x.cols());
    const column means = x.rowwise().sum() / n;
    const matrix centred = x.colwise() - means;
    const column inverse = (centred.array().square().rowwise().sum() / n + epsilon).rsqrt().matrix();
    normalized = (centred.array().colwise() * inverse.array()).matrix();
    output = ((normalized.array().rowwise() * gamma.row(0).array()).rowwise() + beta.row(0).array()).matrix();
    const matrix g = (dy.array().rowwise() * gamma.row(0).array()).matrix();
    const column mean_g = g.rowwise().sum() / n;
    const column mean_g_x = g.cwiseProduct(normalized).rowwise().sum() / n;
    const matrix scaled_normalized = (normalized.array().colwise() * mean_g_x.array()).matrix();
    input_gradient = (((g.colwise() - mean_g) - scaled_normalized).array().colwise() * inverse.array()).matrix();
    gamma_gradient = dy.cwiseProduct(normalized).colwise().sum();
    beta_gradient = dy.colwise().sum();
  }
};

TYPED_TEST(layer_norm_test, forward_and_backward_match_serial_eigen) {
  TypeParam::run(
      [](auto& world) {
        for_every_family(world, [&]<class Layout>(auto& mesh, const matrix_extents& shape) {
          SCOPED_TRACE(::testing::internal::GetTypeName<Layout>());
          using vector_layout = vector_layout_t<Layout>;
          const matrix x_whole = 3 * random_matrix(shape, 11);
          const matrix dy_whole = random_matrix(shape, 12);
          const matrix gamma_whole = random_matrix({1, shape.cols}, 13);
          const matrix beta_whole = random_matrix({1, shape.cols}, 14);
          const serial_layer_norm expected(x_whole, gamma_whole, beta_whole, dy_whole);

          const auto gamma = distribute<vector_layout>(mesh, gamma_whole);
          const auto [y, saved] = layer_norm(distribute<Layout>(mesh, x_whole), gamma,
                                             distribute<vector_layout>(mesh, beta_whole), epsilon);
          expect_near(y, expected.output, 1e-10, "layer norm");
          expect_near(saved.normalized, expected.normalized, 1e-10, "layer norm, x hat");
          const auto [dx, dgamma, dbeta] = layer_norm_backward(distribute<Layout>(mesh, dy_whole), saved, gamma);
          expect_near(dx, expected.input_gradient, 1e-10, "layer norm, dx");
          expect_near(dgamma, expected.gamma_gradient, 1e-10, "layer norm, dgamma");
          expect_near(dbeta, expected.beta_gradient, 1e-10, "layer norm, dbeta");
        });
      },
      rank_counts);
}

TYPED_TEST(layer_norm_test, backward_matches_finite_differences) {
  TypeParam::run(
      [](auto& world) {
        for_column_cutting_layouts(world, [&]<class Layout>(auto& mesh) {
          SCOPED_TRACE(::testing::internal::GetTypeName<Layout>());
          using vector_layout = vector_layout_t<Layout>;
          const matrix x_whole = random_matrix({3, 5}, 21);
          const matrix weights = random_matrix({3, 5}, 22);  // dL/dy of L = Σ weights ∘ y
          const matrix gamma_whole = random_matrix({1, 5}, 23);
          const matrix beta_whole = random_matrix({1, 5}, 24);
          auto loss = [&](const matrix& x, const matrix& gamma, const matrix& beta) {
            return weighted_sum(layer_norm(distribute<Layout>(mesh, x), distribute<vector_layout>(mesh, gamma),
                                           distribute<vector_layout>(mesh, beta), epsilon)
                                    .output,
                                weights);
          };
          const auto gamma = distribute<vector_layout>(mesh, gamma_whole);
          const auto [y, saved] = layer_norm(distribute<Layout>(mesh, x_whole), gamma,
                                             distribute<vector_layout>(mesh, beta_whole), epsilon);
          const auto [dx, dgamma, dbeta] = layer_norm_backward(distribute<Layout>(mesh, weights), saved, gamma);
          expect_near(dx,
                      finite_differences(x_whole, [&](const matrix& at) { return loss(at, gamma_whole, beta_whole); }),
                      1e-7, "dx against differences");
          expect_near(dgamma,
                      finite_differences(gamma_whole, [&](const matrix& at) { return loss(x_whole, at, beta_whole); }),
                      1e-7, "dgamma against differences");
          expect_near(dbeta,
                      finite_differences(beta_whole, [&](const matrix& at) { return loss(x_whole, gamma_whole, at); }),
                      1e-7, "dbeta against differences");
        });
      },
      rank_counts);
}

}  // namespace
