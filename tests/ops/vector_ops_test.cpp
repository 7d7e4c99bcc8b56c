// A + b and A ∘ b with a vector over the columns (ops/add_vector.hpp, ops/multiply_vector.hpp), forward
// and backward, on every layout family and shapes that do not divide the grid, against serial Eigen;
// the 3-D paper's vector path (Algorithms 7 and 8) moves along the axes it names and nowhere else;
// a vector of the wrong length throws on every rank. The 3-D family's padded and ragged layouts compile
// in a source of their own (vector_ops_checks.hpp).
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "ops/ops_testing.hpp"
#include "ops/vector_ops_checks.hpp"
#include "shardwise/comm/threads/communicator.hpp"
#include "shardwise/layout/padding.hpp"
#include "shardwise/layout/vector_layout.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/ops/add_vector.hpp"
#include "shardwise/ops/multiply_vector.hpp"
#include "shardwise/ops/vector_broadcast.hpp"
#include "support/backends.hpp"

namespace {

using namespace shardwise;
using namespace shardwise::ops_testing;

// The vector's storage is what the traits promise.
static_assert(std::is_same_v<vector_layout_t<block_2d<padded>>, split<rows_over<>, cols_over<1>, padded>>);
static_assert(std::is_same_v<vector_layout_t<col_1d<>>, replicated<>>);
static_assert(std::is_same_v<vector_layout_t<cube_3d<>::input>, cube_3d<>::vector>);
static_assert(std::is_same_v<vector_layout_t<cube_3d<>::output>, cube_3d<>::vector>);
static_assert(std::is_same_v<broadcast_vector_layout_t<cube_3d<>::input>, split<rows_over<>, cols_over<2>, exact>>);
static_assert(std::is_same_v<column_sums_layout_t<block_2d<>>, partial_sum<split<rows_over<>, cols_over<1>>, 0>>);

// broadcast_vector hands back the vector itself where nothing moves (1-D, 2-D), but never a temporary:
// a reference to one would dangle once bound to `const auto&`.
template <class Layout>
using vector_of = dtensor<double, vector_layout_t<Layout>, process_mesh<threads::communicator, 2>>;
static_assert(std::is_same_v<decltype(broadcast_vector<block_2d<>>(std::declval<const vector_of<block_2d<>>&>())),
                             const vector_of<block_2d<>>&>);
static_assert(std::is_same_v<decltype(broadcast_vector<block_2d<>>(std::declval<vector_of<block_2d<>>>())),
                             vector_of<block_2d<>>>);

TYPED_TEST(vector_ops_test, add_and_multiply_forward_and_backward_match_serial_eigen) {
  TypeParam::run(
      [](auto& world) {
        expect_family_matches_serial_vector_ops<1>(world);
        expect_family_matches_serial_vector_ops<2>(world);
        expect_family_matches_serial_vector_ops<3, padded, ragged>(world);
        expect_family_matches_serial_vector_ops<3, exact>(world);
      },
      rank_counts);
}

// On a divisible shape the 3-D vector moves as the paper says: forward, a broadcast in y (input
// direction; z for the output direction) and an all-gather in x; backward, a reduce-scatter in x and a
// reduce in y (z). Nothing on the world communicator or the third axis.
TYPED_TEST(vector_ops_test, the_3d_vector_moves_along_the_papers_axes) {
  TypeParam::run(
      [](auto& world) {
        const int p = world.size();
        process_mesh mesh(world, {p == 8 ? 2 : 1, 2, 2});
        const int px = mesh.shape()[0];
        const matrix_extents shape{8, 24};
        const matrix b_whole = random_matrix({1, shape.cols}, 4);
        const matrix c_whole = random_matrix(shape, 5);
        const auto b = distribute<cube_3d<>::vector>(mesh, b_whole);
        const std::int64_t piece_bytes = shape.cols / (2 * px) * static_cast<std::int64_t>(sizeof(double));

        auto check = [&]<class Layout>(int broadcast_axis, int column_axis) {
          SCOPED_TRACE(::testing::internal::GetTypeName<Layout>());
          const auto before = mesh.traffic();
          const auto spread = broadcast_vector<Layout>(b);
          const auto forward = mesh.traffic() - before;
          EXPECT_EQ(forward.world.calls, 0);
          EXPECT_EQ(forward.axes[static_cast<std::size_t>(column_axis)].calls, 0);
          EXPECT_EQ(forward.axes[static_cast<std::size_t>(broadcast_axis)].calls, 1);
          EXPECT_EQ(forward.axes[0].calls, 1);
          EXPECT_EQ(forward.axes[0].bytes_received, (px - 1) * piece_bytes);
          expect_near(spread, b_whole, 0, "b broadcast");

          const auto c = distribute<Layout>(mesh, c_whole);
          const auto middle = mesh.traffic();
          const auto sums = column_sums(c);
          const auto backward = mesh.traffic() - middle;
          EXPECT_EQ(backward.world.calls, 0);
          EXPECT_EQ(backward.axes[static_cast<std::size_t>(column_axis)].calls, 0);
          EXPECT_EQ(backward.axes[static_cast<std::size_t>(broadcast_axis)].calls, 1);
          EXPECT_EQ(backward.axes[0].calls, 1);
          expect_near(sums, c_whole.colwise().sum(), tolerance, "column sums onto the diagonal");
        };
        check.template operator()<cube_3d<>::input>(1, 2);
        check.template operator()<cube_3d<>::output>(2, 1);
      },
      {4, 8});
}

TYPED_TEST(vector_ops_test, a_vector_of_the_wrong_length_throws_on_every_rank) {
  TypeParam::run(
      [](auto& world) {
        process_mesh mesh(world, {world.size()});
        const auto a = distribute<row_1d<padded>>(mesh, random_matrix({4, 6}, 6));
        const auto b = distribute<row_1d<padded>>(mesh, random_matrix({1, 5}, 7));
        try {
          (void)add_vector(a, b);
          ADD_FAILURE() << "a 1x5 vector was added to a 4x6 matrix";
        } catch (const argument_error& e) {
          EXPECT_EQ(e.rank(), world.world_rank());
          const std::string text = e.what();
          EXPECT_NE(text.find("add_vector"), std::string::npos) << text;
          EXPECT_NE(text.find("1x5"), std::string::npos) << text;
        }
        EXPECT_THROW((void)multiply_vector(a, b), argument_error);
      },
      rank_counts);
}

}  // namespace
