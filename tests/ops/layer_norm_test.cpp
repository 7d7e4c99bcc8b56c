// Layer normalisation over rows with gamma and beta (ops/layer_norm.hpp), forward and backward, on every
// layout family and shapes that do not divide the grid, against serial Eigen; dx, dgamma and dbeta
// against central finite differences of the distributed forward on a small case. The 2-D and 3-D
// families' comparisons compile in sources of their own (layer_norm_checks.hpp).
#include <gtest/gtest.h>

#include "ops/layer_norm_checks.hpp"
#include "ops/ops_testing.hpp"
#include "shardwise/layout/padding.hpp"
#include "shardwise/layout/vector_layout.hpp"
#include "shardwise/ops/layer_norm.hpp"
#include "support/backends.hpp"

namespace {

using namespace shardwise;
using namespace shardwise::ops_testing;

TYPED_TEST(layer_norm_test, forward_and_backward_match_serial_eigen) {
  TypeParam::run(
      [](auto& world) {
        expect_family_matches_serial_layer_norm<1>(world);
        expect_family_matches_serial_layer_norm<2>(world);
        expect_family_matches_serial_layer_norm<3, padded, ragged>(world);
        expect_family_matches_serial_layer_norm<3, exact>(world);
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
