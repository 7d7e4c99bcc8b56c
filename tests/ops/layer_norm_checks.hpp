#pragma once
// What the sources of the layer norm test share: the typed test suite, the layer norm on the full matrix,
// and the comparison with it of a layout family's layer norm, forward and backward. The comparisons
// compile in three objects of about the same cost (`extern template` below): the 1-D family's with the
// finite differences (layer_norm_test.cpp); the 2-D family's with the 3-D family's exact layouts, on the
// shape that divides the grid (layer_norm_2d_3d_exact.cpp); the 3-D family's padded and ragged layouts
// (layer_norm_3d_padded_ragged.cpp). The 3-D family alone compiles about as long as the 1-D and 2-D ones.
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <cstddef>

#include "ops/ops_testing.hpp"
#include "shardwise/layout/padding.hpp"
#include "shardwise/layout/vector_layout.hpp"
#include "shardwise/ops/layer_norm.hpp"
#include "support/backends.hpp"

namespace shardwise::ops_testing {

template <class Backend>
class layer_norm_test : public ::testing::Test {};
TYPED_TEST_SUITE(layer_norm_test, shardwise::testing::backends);

inline constexpr double epsilon = 1e-5;

// Layer norm on the full matrix, written out from its definition.
struct serial_layer_norm {
  using column = Eigen::VectorXd;
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

// Layer norm forward and backward in every layout of the family on meshes of `Dimensions` dimensions, of
// the padding rules given (for_family), equal the serial layer norm. Collective.
template <std::size_t Dimensions, padding_rule... Paddings>
void expect_family_matches_serial_layer_norm(shardwise::testing::backend::communicator_type& world) {
  for_family<Dimensions, Paddings...>(world, [&]<class Layout>(auto& mesh, const matrix_extents& shape) {
    SCOPED_TRACE(::testing::internal::GetTypeName<Layout>());
    using vector_layout = vector_layout_t<Layout>;
    const matrix x_whole = 3 * random_matrix(shape, 11);
    const matrix dy_whole = random_matrix(shape, 12);
    const matrix gamma_whole = random_matrix({1, shape.cols}, 13);
    const matrix beta_whole = random_matrix({1, shape.cols}, 14);
    const serial_layer_norm expected(x_whole, gamma_whole, beta_whole, dy_whole);

    const auto gamma = distribute<vector_layout>(mesh, gamma_whole);
    const auto [y, saved] =
        layer_norm(distribute<Layout>(mesh, x_whole), gamma, distribute<vector_layout>(mesh, beta_whole), epsilon);
    expect_near(y, expected.output, 1e-10, "layer norm");
    expect_near(saved.normalized, expected.normalized, 1e-10, "layer norm, x hat");
    const auto [dx, dgamma, dbeta] = layer_norm_backward(distribute<Layout>(mesh, dy_whole), saved, gamma);
    expect_near(dx, expected.input_gradient, 1e-10, "layer norm, dx");
    expect_near(dgamma, expected.gamma_gradient, 1e-10, "layer norm, dgamma");
    expect_near(dbeta, expected.beta_gradient, 1e-10, "layer norm, dbeta");
  });
}

extern template void expect_family_matches_serial_layer_norm<2>(shardwise::testing::backend::communicator_type&);
extern template void expect_family_matches_serial_layer_norm<3, exact>(shardwise::testing::backend::communicator_type&);
extern template void expect_family_matches_serial_layer_norm<3, padded, ragged>(
    shardwise::testing::backend::communicator_type&);

}  // namespace shardwise::ops_testing
