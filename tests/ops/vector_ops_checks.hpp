#pragma once
// What the sources of the vector ops test share: the typed test suite, and a layout family's A + b and
// A ∘ b, forward and backward, against serial Eigen. The 3-D family's padded and ragged layouts, on the
// shapes that do not divide the grid, compile in a source of their own (vector_ops_3d_padded_ragged.cpp;
// `extern template` below): the 3-D family takes longer to compile than the 1-D and 2-D ones together.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>

#include "ops/ops_testing.hpp"
#include "shardwise/core/shared_buffer.hpp"
#include "shardwise/layout/padding.hpp"
#include "shardwise/layout/vector_layout.hpp"
#include "shardwise/ops/add_vector.hpp"
#include "shardwise/ops/multiply_vector.hpp"
#include "support/backends.hpp"

namespace shardwise::ops_testing {

template <class Backend>
class vector_ops_test : public ::testing::Test {};
TYPED_TEST_SUITE(vector_ops_test, shardwise::testing::backends);

inline constexpr double tolerance = 1e-12;

// A + b and A ∘ b, forward and backward, in every layout of the family on meshes of `Dimensions`
// dimensions, of the padding rules given (for_family), equal serial Eigen. Collective.
template <std::size_t Dimensions, padding_rule... Paddings>
void expect_family_matches_serial_vector_ops(shardwise::testing::backend::communicator_type& world) {
  for_family<Dimensions, Paddings...>(world, [&]<class Layout>(auto& mesh, const matrix_extents& shape) {
    SCOPED_TRACE(::testing::internal::GetTypeName<Layout>());
    const matrix a_whole = random_matrix(shape, 1);
    const matrix dc_whole = random_matrix(shape, 2);
    const matrix b_whole = random_matrix({1, shape.cols}, 3);
    const auto a = distribute<Layout>(mesh, a_whole);
    const auto dc = distribute<Layout>(mesh, dc_whole);
    const auto b = distribute<vector_layout_t<Layout>>(mesh, b_whole);

    expect_near(add_vector(a, b), a_whole.rowwise() + b_whole.row(0), tolerance, "A + b");
    // A temporary takes b in its own storage; a tensor bound to an update's buffer leaves the buffer be.
    auto temporary = distribute<Layout>(mesh, a_whole);
    const auto* storage = temporary.data().data();
    const auto in_place = add_vector(std::move(temporary), b);
    EXPECT_EQ(in_place.data().data(), storage) << "A + b of a temporary is a new tensor";
    expect_near(in_place, a_whole.rowwise() + b_whole.row(0), tolerance, "A + b in place");
    auto bound = distribute<Layout>(mesh, a_whole);
    const auto flat = shared_buffer<typename decltype(bound)::value_type>::zeros(bound.data().size());
    bound.bind(flat);
    expect_near(add_vector(std::move(bound), b), a_whole.rowwise() + b_whole.row(0), tolerance, "A + b, A bound");
    EXPECT_TRUE(std::ranges::equal(flat.span(), a.data())) << "A + b wrote into the buffer A is bound to";
    const auto [add_da, add_db] = add_vector_backward(dc);
    expect_near(add_da, dc_whole, 0, "dA of A + b");
    expect_near(add_db, dc_whole.colwise().sum(), tolerance, "db of A + b");

    expect_near(multiply_vector(a, b), (a_whole.array().rowwise() * b_whole.row(0).array()).matrix(), tolerance,
                "A o b");
    const auto [multiply_da, multiply_db] = multiply_vector_backward(dc, a, b);
    expect_near(multiply_da, (dc_whole.array().rowwise() * b_whole.row(0).array()).matrix(), tolerance, "dA of A o b");
    expect_near(multiply_db, dc_whole.cwiseProduct(a_whole).colwise().sum(), tolerance, "db of A o b");
  });
}

extern template void expect_family_matches_serial_vector_ops<3, padded, ragged>(
    shardwise::testing::backend::communicator_type&);

}  // namespace shardwise::ops_testing
