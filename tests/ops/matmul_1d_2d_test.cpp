// The 1-D (Megatron) and 2-D (SUMMA) products on every backend: each form of each family equals serial
// Eigen on the whole matrices for every padding rule and shapes that do not divide (SUMMA with its
// broadcasts ahead and in turn); gradients match finite differences; the bytes each rank moves are each
// algorithm's count; SUMMA on a grid that is not square throws, naming the grid.
#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <vector>

#include "ops/matmul_checks.hpp"
#include "shardwise/layout/partial_sum.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/ops/matmul.hpp"
#include "shardwise/tensor/reduce.hpp"
#include "support/backends.hpp"

namespace {

using namespace shardwise;
using shardwise::testing::check_gradients_by_finite_differences;
using shardwise::testing::distributed;
using shardwise::testing::expect_equals_serial;
using shardwise::testing::matrix;
using shardwise::testing::serial;

template <class Backend>
class matmul_1d_2d_test : public ::testing::Test {};
TYPED_TEST_SUITE(matmul_1d_2d_test, shardwise::testing::backends);

struct product_shape {
  std::int64_t m, k, n;
};

std::vector<product_shape> shapes(std::int64_t p) { return {{1, 1, 1}, {13, 7, 11}, {5, 9, 3}, {2 * p, p, 3 * p}}; }

template <class Tensor, class Layout>
constexpr bool has_layout = std::is_same_v<typename Tensor::layout_type, Layout>;

// Column-parallel (W's columns cut) and row-parallel (W's rows cut) layers, forward and both gradients.
template <class Padding, class Mesh>
void check_megatron(Mesh& mesh, const product_shape& s) {
  SCOPED_TRACE("grid " + shape_string(mesh.shape()) + ", padding " + std::string(Padding::name) +
               ", M x K x N = " + std::to_string(s.m) + " x " + std::to_string(s.k) + " x " + std::to_string(s.n));
  const matrix x = serial({s.m, s.k}, 1);
  const matrix w = serial({s.k, s.n}, 2);
  const matrix dy = serial({s.m, s.n}, 3);

  const auto x_whole = distributed<replicated<>>(mesh, x);
  const auto w_columns = distributed<row_1d<Padding>>(mesh, w);
  const auto dy_columns = distributed<row_1d<Padding>>(mesh, dy);
  const auto y = matmul(x_whole, w_columns);
  static_assert(has_layout<decltype(y), row_1d<Padding>>);
  expect_equals_serial(y, x * w);
  const auto dx_addends = matmul(dy_columns, transposed(w_columns));
  static_assert(has_layout<decltype(dx_addends), partial_sum<replicated<>, 0>>);
  expect_equals_serial(reduce(dx_addends), dy * w.transpose());
  const auto dw = matmul(transposed(x_whole), dy_columns);
  static_assert(has_layout<decltype(dw), row_1d<Padding>>);
  expect_equals_serial(dw, x.transpose() * dy);

  const auto x_columns = distributed<row_1d<Padding>>(mesh, x);
  const auto w_rows = distributed<col_1d<Padding>>(mesh, w);
  const auto dy_whole = distributed<replicated<>>(mesh, dy);
  const auto y_addends = matmul(x_columns, w_rows);
  static_assert(has_layout<decltype(y_addends), partial_sum<replicated<>, 0>>);
  expect_equals_serial(reduce(y_addends), x * w);
  const auto dx = matmul(dy_whole, transposed(w_rows));
  static_assert(has_layout<decltype(dx), row_1d<Padding>>);
  expect_equals_serial(dx, dy * w.transpose());
  const auto dw_rows = matmul(transposed(x_columns), dy_whole);
  static_assert(has_layout<decltype(dw_rows), col_1d<Padding>>);
  expect_equals_serial(dw_rows, x.transpose() * dy);
}

// Each form with the broadcasts started a step ahead and in turn.
template <class Padding, class Mesh>
void check_summa(Mesh& mesh, const product_shape& s) {
  for (const summa_broadcasts when : {summa_broadcasts::ahead, summa_broadcasts::in_turn}) {
    SCOPED_TRACE("grid " + shape_string(mesh.shape()) + ", padding " + std::string(Padding::name) +
                 ", M x K x N = " + std::to_string(s.m) + " x " + std::to_string(s.k) + " x " + std::to_string(s.n) +
                 (when == summa_broadcasts::ahead ? ", broadcasts ahead" : ", broadcasts in turn"));
    const matrix a = serial({s.m, s.k}, 1);
    const matrix b = serial({s.k, s.n}, 2);
    const matrix dc = serial({s.m, s.n}, 3);
    const auto da = distributed<block_2d<Padding>>(mesh, a);
    const auto db = distributed<block_2d<Padding>>(mesh, b);
    const auto ddc = distributed<block_2d<Padding>>(mesh, dc);
    const matmul_options options{.summa = when};
    expect_equals_serial(matmul(da, db, options), a * b);
    expect_equals_serial(matmul(ddc, transposed(db), options), dc * b.transpose());
    expect_equals_serial(matmul(transposed(da), ddc, options), a.transpose() * dc);
  }
}

TYPED_TEST(matmul_1d_2d_test, megatron_products_equal_serial_eigen) {
  TypeParam::run(
      [](communicator auto& world) {
        const int p = world.size();
        process_mesh line(world, {p});
        // Replicated over a second axis: tensor parallelism beside data parallelism.
        process_mesh beside(world, {p % 2 == 0 ? p / 2 : p, p % 2 == 0 ? 2 : 1});
        for (const auto& s : shapes(p)) {
          check_megatron<padded>(line, s);
          check_megatron<ragged>(line, s);
          check_megatron<ragged>(beside, s);
        }
        check_megatron<exact>(line, {2 * p, p, 3 * p});
      },
      {1, 2, 3, 4, 9});
}

TYPED_TEST(matmul_1d_2d_test, summa_products_equal_serial_eigen) {
  TypeParam::run(
      [](communicator auto& world) {
        const int q = world.size() == 9 ? 3 : world.size() == 4 ? 2 : 1;
        if (q * q != world.size()) return;
        process_mesh mesh(world, {q, q});
        for (const auto& s : shapes(q)) {
          check_summa<padded>(mesh, s);
          check_summa<ragged>(mesh, s);
        }
        check_summa<exact>(mesh, {2 * q, q, 3 * q});
      },
      {1, 4, 9});
}

TYPED_TEST(matmul_1d_2d_test, gradients_match_finite_differences) {
  TypeParam::run(
      [](communicator auto& world) {
        process_mesh line(world, {world.size()});
        check_gradients_by_finite_differences<replicated<>, row_1d<ragged>>(line, 3, 4, 5);    // column-parallel
        check_gradients_by_finite_differences<row_1d<padded>, col_1d<padded>>(line, 3, 4, 5);  // row-parallel
        if (world.size() == 4) {
          process_mesh grid(world, {2, 2});
          check_gradients_by_finite_differences<block_2d<ragged>, block_2d<ragged>>(grid, 3, 4, 5);
        }
      },
      {1, 3, 4});
}

// Megatron: only the sum of a cut inner dimension moves data, an all-reduce of the M x N result over
// axis 0 (2(P-1)/P of it each way). SUMMA per rank, blocks of |A|, |B|, |C| bytes on a q x q grid:
//   A·B   receives (q-1)(|A| + |B|), sends |A| + |B|
//   A·Bᵀ  receives (q-1)(|B| + |C|), sends |B| + (q-1)|C|
//   Aᵀ·B  receives (q-1)(|A| + |C|), sends |A| + (q-1)|C|
TYPED_TEST(matmul_1d_2d_test, bytes_moved_are_each_algorithms_count) {
  TypeParam::run(
      [](communicator auto& world) {
        const std::int64_t p = world.size();
        const std::int64_t m = 2 * p;
        const std::int64_t k = 3 * p;
        const std::int64_t n = 4 * p;
        auto moved_by = [](auto& mesh, auto&& work) {
          const auto before = mesh.traffic();
          work();
          return (mesh.traffic() - before).total();
        };

        process_mesh line(world, {static_cast<int>(p)});
        const auto x = distributed<row_1d<>>(line, serial({m, k}, 1));
        const auto w = distributed<col_1d<>>(line, serial({k, n}, 2));
        const auto w_columns = distributed<row_1d<>>(line, serial({k, n}, 2));
        const auto x_whole = distributed<replicated<>>(line, serial({m, k}, 1));
        const std::int64_t all_reduced = 2 * (p - 1) * (m * n * 8) / p;
        EXPECT_EQ(moved_by(line, [&] { (void)reduce(matmul(x, w)); }), (traffic_count{1, all_reduced, all_reduced}));
        EXPECT_EQ(moved_by(line, [&] { (void)matmul(x_whole, w_columns); }), traffic_count{});

        const std::int64_t q = p == 4 ? 2 : p == 9 ? 3 : 1;
        if (q * q != p) return;
        process_mesh grid(world, {static_cast<int>(q), static_cast<int>(q)});
        const auto a = distributed<block_2d<>>(grid, serial({m, k}, 1));
        const auto b = distributed<block_2d<>>(grid, serial({k, n}, 2));
        const auto c = distributed<block_2d<>>(grid, serial({m, n}, 3));
        const std::int64_t a_block = m * k / p * 8;
        const std::int64_t b_block = k * n / p * 8;
        const std::int64_t sent_as_root = q > 1 ? 1 : 0;
        EXPECT_EQ(moved_by(grid, [&] { (void)matmul(a, b); }),
                  (traffic_count{2 * q, sent_as_root * (a_block + b_block), (q - 1) * (a_block + b_block)}));
        EXPECT_EQ(moved_by(grid, [&] { (void)matmul(c, transposed(b)); }),
                  (traffic_count{2 * q, sent_as_root * b_block + (q - 1) * a_block, (q - 1) * (b_block + a_block)}));
        EXPECT_EQ(moved_by(grid, [&] { (void)matmul(transposed(a), c); }),
                  (traffic_count{2 * q, sent_as_root * a_block + (q - 1) * b_block, (q - 1) * (a_block + b_block)}));
      },
      {1, 3, 4, 9});
}

TYPED_TEST(matmul_1d_2d_test, summa_on_a_grid_that_is_not_square_throws_naming_it) {
  TypeParam::run(
      [](communicator auto& world) {
        process_mesh grid(world, {1, world.size()});
        const auto a = distributed<block_2d<ragged>>(grid, serial({5, 4}, 1));
        const auto b = distributed<block_2d<ragged>>(grid, serial({4, 3}, 2));
        for (const summa_broadcasts when : {summa_broadcasts::ahead, summa_broadcasts::in_turn}) {
          try {
            (void)matmul(a, b, {.summa = when});
            FAIL() << "SUMMA ran on the grid 1x" << world.size();
          } catch (const mesh_error& e) {
            const std::string text = e.what();
            EXPECT_EQ(e.rank(), world.world_rank());
            EXPECT_NE(text.find("the mesh is 1x" + std::to_string(world.size())), std::string::npos) << text;
            // The call as it was made: options other than the defaults are named.
            const bool names_in_turn = text.find(" 4x3, SUMMA in turn): ") != std::string::npos;
            EXPECT_EQ(names_in_turn, when == summa_broadcasts::in_turn) << text;
          }
        }
      },
      {3, 4});
}

}  // namespace
