// The 3-D products on every backend: the three forms (A·B, A·Bᵀ, Aᵀ·B) equal serial Eigen on the
// whole matrices, for cubes and rectangular grids of 1, 4, 8, 12 and 16 ranks, three choices of directions
// (the paper's, its swap, another), every padding rule, shapes that divide and shapes that do not;
// layers chain through cube_3d::swapped; gradients match finite differences; and the bytes each rank
// moves are the paper's count. Each choice of directions compiles its comparisons with Eigen in a
// source of its own (matmul_3d_checks.hpp).
#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <utility>

#include "ops/matmul_3d_checks.hpp"
#include "ops/matmul_checks.hpp"
#include "shardwise/layout/cube_3d.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/mesh/shape.hpp"
#include "shardwise/ops/matmul.hpp"
#include "shardwise/tensor/dtensor.hpp"
#include "support/backends.hpp"

namespace {

using namespace shardwise;
using namespace shardwise::testing;

constexpr std::initializer_list<int> rank_counts = {1, 4, 8, 12};

// The layout patterns are cube_3d's, for every directions.
static_assert(detail::cube_product<cube_3d<>::input, cube_3d<>::weight, false, false>::exists);
static_assert(
    std::is_same_v<detail::cube_product<cube_3d<>::swapped::input, cube_3d<>::swapped::weight, false, false>::result,
                   cube_3d<>::swapped::output>);
static_assert(!detail::cube_product<cube_3d<>::input, cube_3d<>::swapped::weight, false, false>::exists);
static_assert(std::is_same_v<cube_3d<>::swapped, cube_3d<directions<2, 0, 1>>>);

TYPED_TEST(matmul_3d_test, every_form_equals_serial_eigen) {
  TypeParam::run(
      [](communicator auto& world) {
        for (const auto& grid : grids(world.size())) {
          process_mesh mesh(world, grid);
          check_every_padding<directions<>>(mesh);
          check_every_padding<directions<2, 0, 1>>(mesh);  // cube_3d<>::swapped
          check_every_padding<directions<0, 2, 1>>(mesh);
        }
      },
      {1, 4, 8, 12, 16});
}

// Two layers: the first's output is the second's input, with the directions swapped in the type.
TYPED_TEST(matmul_3d_test, layers_chain_through_the_swapped_cube) {
  TypeParam::run(
      [](communicator auto& world) {
        process_mesh mesh(world, balanced_shape<3>(world.size()));
        using first = cube_3d<directions<>, padded>;
        using second = first::swapped;
        const matrix x = serial({10, 6}, 4);
        const matrix w1 = serial({6, 9}, 5);
        const matrix w2 = serial({9, 7}, 6);
        const auto h = matmul(distributed<first::input>(mesh, x), distributed<first::weight>(mesh, w1));
        const auto y = matmul(h, distributed<second::weight>(mesh, w2));
        static_assert(std::is_same_v<typename decltype(y)::layout_type, first::input>);
        expect_equals_serial(y, x * w1 * w2);
      },
      rank_counts);
}

// The signature bench/matmul uses, in float.
TYPED_TEST(matmul_3d_test, float_products_of_the_default_cube) {
  TypeParam::run(
      [](communicator auto& world) {
        process_mesh mesh(world, balanced_shape<3>(world.size()));
        using Mesh = decltype(mesh);
        const int p = world.size();
        const matrix a = serial({4 * p, 2 * p}, 7);
        const matrix b = serial({2 * p, 3 * p}, 8);
        const dtensor<float, cube_3d<>::input, Mesh> fa = distributed<cube_3d<>::input, float>(mesh, a);
        const dtensor<float, cube_3d<>::weight, Mesh> fb = distributed<cube_3d<>::weight, float>(mesh, b);
        const dtensor<float, cube_3d<>::output, Mesh> c = shardwise::matmul(fa, fb);
        expect_equals_serial(c, a * b, 1e-5);
      },
      rank_counts);
}

TYPED_TEST(matmul_3d_test, gradients_match_finite_differences) {
  TypeParam::run(
      [](communicator auto& world) {
        process_mesh mesh(world, balanced_shape<3>(world.size()));
        using cube = cube_3d<directions<>, padded>;
        check_gradients_by_finite_differences<cube::input, cube::weight>(mesh, 3, 4, 5);
        using ragged_cube = cube_3d<directions<>, ragged>::swapped;
        check_gradients_by_finite_differences<ragged_cube::input, ragged_cube::weight>(mesh, 5, 2, 3);
      },
      rank_counts);
}

// Per rank, each all-gather or reduce-scatter over an axis of q ranks moves (q - 1) blocks each way:
// on a p x p x p cube, (p - 1)(MN + NK + MK)/p³ elements in all, the paper's count.
TYPED_TEST(matmul_3d_test, bytes_moved_are_the_papers_count) {
  TypeParam::run(
      [](communicator auto& world) {
        process_mesh mesh(world, balanced_shape<3>(world.size()));
        using cube = cube_3d<>;
        const auto& grid = mesh.shape();
        const std::int64_t p = world.size();
        const std::int64_t m = 2 * p;
        const std::int64_t k = 3 * p;
        const std::int64_t n = 4 * p;
        const auto a = distributed<cube::input, float>(mesh, serial({m, k}, 1));
        const auto b = distributed<cube::weight, float>(mesh, serial({k, n}, 2));
        const auto c = distributed<cube::output, float>(mesh, serial({m, n}, 3));
        const std::int64_t a_block = m * k / p * 4;  // bytes of each rank's block
        const std::int64_t b_block = k * n / p * 4;
        const std::int64_t c_block = m * n / p * 4;
        // Per form: (axis, block) for the left gather, the right gather and the reduce-scatter.
        auto expect_moved = [&](auto&& product, std::array<std::pair<std::size_t, std::int64_t>, 3> steps) {
          const auto before = mesh.traffic();
          (void)product();
          const auto moved = mesh.traffic() - before;
          EXPECT_EQ(moved.world, traffic_count{});
          std::int64_t total = 0;
          for (const auto& [axis, block] : steps) {
            const std::int64_t bytes = (grid[axis] - 1) * block;
            EXPECT_EQ(moved.axes[axis], (traffic_count{1, bytes, bytes})) << "axis " << axis;
            total += bytes;
          }
          EXPECT_EQ(moved.total().bytes_sent, total);
          if (grid[0] == grid[1] && grid[1] == grid[2]) {
            const std::int64_t q = grid[0];
            EXPECT_EQ(total, (q - 1) * (m * k + k * n + m * n) / (q * q * q) * 4);
          }
        };
        // The paper's directions: a = y (1), b = x (0), c = z (2).
        expect_moved([&] { return matmul(a, b); }, {{{1, a_block}, {0, b_block}, {2, c_block}}});
        expect_moved([&] { return matmul(c, transposed(b)); }, {{{2, c_block}, {0, b_block}, {1, a_block}}});
        expect_moved([&] { return matmul(transposed(a), c); }, {{{1, a_block}, {2, c_block}, {0, b_block}}});
      },
      {1, 8, 12});
}

TYPED_TEST(matmul_3d_test, inner_dimensions_that_differ_throw_on_every_rank) {
  TypeParam::run(
      [](communicator auto& world) {
        process_mesh mesh(world, balanced_shape<3>(world.size()));
        using cube = cube_3d<directions<>, padded>;
        const auto a = distributed<cube::input>(mesh, serial({6, 5}, 1));
        const auto b = distributed<cube::weight>(mesh, serial({4, 3}, 2));
        try {
          (void)matmul(a, b);
          FAIL() << "a 6x5 times 4x3 product was accepted";
        } catch (const argument_error& e) {
          const std::string text = e.what();
          EXPECT_EQ(e.rank(), world.world_rank());
          EXPECT_NE(text.find("inner dimensions 5 and 4 differ"), std::string::npos) << text;
        }
      },
      {1, 4});
}

}  // namespace
