// Collective matmul on every backend. The 1-D rings (all_gather_matmul, matmul_reduce_scatter) in each
// form, forward and gradient, and the 3-D product pipelined in bands (matmul_options::chunks: the left
// operand's all-gather, the GEMM and the reduce-scatter band by band) equal serial Eigen on the whole
// matrices: bit for bit on small integers, where every order of summation is exact, and within
// rounding on fractions; for every padding rule, shapes that do not divide, band counts that do not
// divide, grids whose cuts of the product's rows differ, P = 1 and rings beside a second mesh axis.
// all_gather_matmul_both_sides gives each of its two rings' bits, gathering once, and so does
// all_gather_matmul of several products of one gathered operand; matmul_reduce_scatter of several
// products reduce-scatters their sum once. The rings move what an
// all-gather or a reduce-scatter moves, the bands are separate all-gathers and reduce-scatters moving
// what the plain product's collectives move, and the linear layers that use them equal the serial layer.
// Each 1-D product also runs unfused (the whole collective, then the GEMM, or the reverse), with the
// same results; a call asking for the automatic form throws. The bands and the linear layers compile
// in sources of their own (collective_matmul_checks.hpp); the products in float (the traffic of rings
// and bands) compile here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "ops/collective_matmul_checks.hpp"
#include "ops/matmul_checks.hpp"
#include "shardwise/layout/cube_3d.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/mesh/shape.hpp"
#include "shardwise/ops/collective_matmul.hpp"
#include "shardwise/ops/matmul.hpp"
#include "support/backends.hpp"

namespace {

using namespace shardwise;
using namespace shardwise::testing;

std::vector<product_shape> shapes(std::int64_t p) { return {{1, 1, 1}, {13, 7, 11}, {5, 9, 3}, {2 * p, p, 3 * p}}; }

template <class Tensor, class Layout>
constexpr bool has_layout = std::is_same_v<typename Tensor::layout_type, Layout>;

template <class T, class Layout, class Mesh>
void expect_same_bits(const dtensor<T, Layout, Mesh>& a, const dtensor<T, Layout, Mesh>& b) {
  ASSERT_EQ(a.extents(), b.extents());
  EXPECT_TRUE(std::ranges::equal(a.data(), b.data()));
}

// Both rings in each of their forms: sequence-parallel column-parallel (x rows cut, W columns cut) and
// row-parallel (h columns cut, V rows cut, the sum's rows cut), each forward and both gradients; as
// rings, or unfused (`form`).
template <class Padding, class Mesh>
void check_rings(Mesh& mesh, const product_shape& s, const operands& kind, collective_matmul_form form) {
  SCOPED_TRACE("grid " + shape_string(mesh.shape()) + ", padding " + std::string(Padding::name) +
               ", M x K x N = " + std::to_string(s.m) + " x " + std::to_string(s.k) + " x " + std::to_string(s.n) +
               ", " + kind.name + (form == collective_matmul_form::ring ? ", ring" : ", unfused"));
  const matrix x = kind.values({s.m, s.k}, 1);
  const matrix w = kind.values({s.k, s.n}, 2);
  const matrix dy = kind.values({s.m, s.n}, 3);
  const auto x_rows = distributed<col_1d<Padding>>(mesh, x);
  const auto w_columns = distributed<row_1d<Padding>>(mesh, w);
  const auto dy_columns = distributed<row_1d<Padding>>(mesh, dy);
  const auto y = all_gather_matmul(x_rows, w_columns, form);
  static_assert(has_layout<decltype(y), row_1d<Padding>>);
  expect_equals_serial(y, x * w, kind.tolerance);
  const auto dx = matmul_reduce_scatter(dy_columns, transposed(w_columns), form);
  static_assert(has_layout<decltype(dx), col_1d<Padding>>);
  expect_equals_serial(dx, dy * w.transpose(), kind.tolerance);
  const auto dw = all_gather_matmul(transposed(x_rows), dy_columns, form);
  static_assert(has_layout<decltype(dw), row_1d<Padding>>);
  expect_equals_serial(dw, x.transpose() * dy, kind.tolerance);

  // Linears that read one input (Q, K and V), its rows gathered once for their products: each result
  // the bits of its own ring; their input gradients summed and reduce-scattered once.
  const matrix w2 = kind.values({s.k, s.n}, 7);
  const matrix dy2 = kind.values({s.m, s.n}, 8);
  const auto w2_columns = distributed<row_1d<Padding>>(mesh, w2);
  const auto dy2_columns = distributed<row_1d<Padding>>(mesh, dy2);
  const auto [y_shared, y2_shared] = all_gather_matmul(x_rows, std::tie(w_columns, w2_columns), form);
  expect_same_bits(y_shared, y);
  expect_equals_serial(y2_shared, x * w2, kind.tolerance);
  const auto [dw_shared, dw2_shared] = all_gather_matmul(transposed(x_rows), std::tie(dy_columns, dy2_columns), form);
  expect_same_bits(dw_shared, dw);
  expect_equals_serial(dw2_shared, x.transpose() * dy2, kind.tolerance);
  const auto dx_summed = matmul_reduce_scatter(std::tie(dy_columns, dy2_columns),
                                               std::tuple{transposed(w_columns), transposed(w2_columns)}, form);
  static_assert(has_layout<decltype(dx_summed), col_1d<Padding>>);
  expect_equals_serial(dx_summed, dy * w.transpose() + dy2 * w2.transpose(), kind.tolerance);

  const matrix h = kind.values({s.m, s.k}, 4);
  const matrix v = kind.values({s.k, s.n}, 5);
  const matrix dz = kind.values({s.m, s.n}, 6);
  const auto h_columns = distributed<row_1d<Padding>>(mesh, h);
  const auto v_rows = distributed<col_1d<Padding>>(mesh, v);
  const auto dz_rows = distributed<col_1d<Padding>>(mesh, dz);
  const auto z = matmul_reduce_scatter(h_columns, v_rows, form);
  static_assert(has_layout<decltype(z), col_1d<Padding>>);
  expect_equals_serial(z, h * v, kind.tolerance);
  const auto dh = all_gather_matmul(dz_rows, transposed(v_rows), form);
  static_assert(has_layout<decltype(dh), row_1d<Padding>>);
  expect_equals_serial(dh, dz * v.transpose(), kind.tolerance);
  const auto dv = all_gather_matmul(transposed(h_columns), dz_rows, form);
  static_assert(has_layout<decltype(dv), col_1d<Padding>>);
  expect_equals_serial(dv, h.transpose() * dz, kind.tolerance);
  // Both in one ring: the same bits as each ring alone.
  const auto [dv_once, dh_once] =
      all_gather_matmul_both_sides(transposed(h_columns), dz_rows, transposed(v_rows), form);
  static_assert(has_layout<decltype(dv_once), col_1d<Padding>> && has_layout<decltype(dh_once), row_1d<Padding>>);
  expect_same_bits(dv_once, dv);
  expect_same_bits(dh_once, dh);
}

TYPED_TEST(collective_matmul_test, rings_equal_serial_eigen) {
  TypeParam::run(
      [](communicator auto& world) {
        const int p = world.size();
        process_mesh line(world, {p});
        // Replicated over a second axis: tensor parallelism beside data parallelism.
        process_mesh beside(world, {p % 2 == 0 ? p / 2 : p, p % 2 == 0 ? 2 : 1});
        for (const auto form : {collective_matmul_form::ring, collective_matmul_form::unfused}) {
          for (const operands& kind : kinds) {
            for (const auto& s : shapes(p)) {
              check_rings<padded>(line, s, kind, form);
              check_rings<ragged>(line, s, kind, form);
              check_rings<ragged>(beside, s, kind, form);
            }
            check_rings<exact>(line, {2 * p, p, 3 * p}, kind, form);
          }
        }
      },
      {1, 2, 3, 4, 8});
}

// Per rank, the all-gather ring sends and receives P - 1 pieces of the gathered operand and the
// reduce-scatter ring P - 1 blocks of the result, one message each way per step, along axis 0 only.
TYPED_TEST(collective_matmul_test, rings_move_what_the_collectives_move) {
  TypeParam::run(
      [](communicator auto& world) {
        const std::int64_t p = world.size();
        process_mesh mesh(world, {static_cast<int>(p)});
        const std::int64_t m = 4 * p, k = 3 * p, n = 2 * p;
        const auto x = distributed<col_1d<>, float>(mesh, serial({m, k}, 1));
        const auto w = distributed<row_1d<>, float>(mesh, serial({k, n}, 2));
        const auto h = distributed<row_1d<>, float>(mesh, serial({m, k}, 3));
        const auto v = distributed<col_1d<>, float>(mesh, serial({k, n}, 4));
        auto expect_moved = [&](auto&& product, std::int64_t block_bytes) {
          const auto before = mesh.traffic();
          (void)product();
          const auto moved = mesh.traffic() - before;
          EXPECT_EQ(moved.world, traffic_count{});
          const std::int64_t bytes = (p - 1) * block_bytes;
          EXPECT_EQ(moved.axes[0], (traffic_count{2 * (p - 1), bytes, bytes}));
        };
        expect_moved([&] { return all_gather_matmul(x, w); }, m / p * k * 4);
        expect_moved([&] { return matmul_reduce_scatter(h, v); }, m / p * n * 4);
        // Gathered once for both products: what one all-gather of it moves.
        const auto dz = distributed<col_1d<>, float>(mesh, serial({m, n}, 5));
        expect_moved([&] { return all_gather_matmul_both_sides(transposed(h), dz, transposed(v)); }, m / p * n * 4);
        // Gathered once for several products, and several products' sum reduce-scattered once.
        expect_moved([&] { return all_gather_matmul(x, std::tie(w, w, w)); }, m / p * k * 4);
        expect_moved([&] { return matmul_reduce_scatter(std::tie(h, h), std::tie(v, v)); }, m / p * n * 4);
      },
      {1, 3, 4, 8});
}

// The rings' messages travel on the mesh's private axis: a user's messages on axis 0 to both
// neighbours, started before a ring and received after it, with the tag the rings once used, neither
// meet the ring's messages nor are changed by them. (They are one element longer than a piece, so a
// ring receiving one fails at once instead of waiting for its own message.)
TYPED_TEST(collective_matmul_test, user_messages_on_axis_0_do_not_meet_the_rings) {
  TypeParam::run(
      [](communicator auto& world) {
        const int p = world.size();
        process_mesh mesh(world, {p});
        auto& line = mesh.axis(0);
        const int me = line.rank();
        const int previous = (me + p - 1) % p;
        const int next = (me + 1) % p;
        const std::int64_t m = 4 * p, k = 24, n = 24;  // pieces (m / p) x k and (m / p) x n alike
        constexpr std::size_t length = 4 * 24 + 1;
        constexpr int once_the_rings_tag = 0x636d;
        const auto x = distributed<col_1d<>>(mesh, serial({m, k}, 1));
        const auto w = distributed<row_1d<>>(mesh, serial({k, n}, 2));
        const auto h = distributed<row_1d<>>(mesh, serial({m, k}, 3));
        const auto v = distributed<col_1d<>>(mesh, serial({k, n}, 4));
        const auto around = [&](auto&& product, const matrix& expected) {
          const std::vector<double> to_previous(length, me + 0.25), to_next(length, me + 0.5);
          std::vector<double> from_next(length), from_previous(length);
          auto first = line.isend(std::span<const double>(to_previous), previous, once_the_rings_tag);
          auto second = line.isend(std::span<const double>(to_next), next, once_the_rings_tag);
          expect_equals_serial(product(), expected);
          line.recv(std::span<double>(from_next), next, once_the_rings_tag);
          line.recv(std::span<double>(from_previous), previous, once_the_rings_tag);
          first.wait();
          second.wait();
          // (With two ranks both come from the one neighbour, matched in the order sent.)
          EXPECT_EQ(from_next, std::vector<double>(length, next + 0.25));
          EXPECT_EQ(from_previous, std::vector<double>(length, previous + 0.5));
        };
        around([&] { return all_gather_matmul(x, w); }, serial({m, k}, 1) * serial({k, n}, 2));
        around([&] { return matmul_reduce_scatter(h, v); }, serial({m, k}, 3) * serial({k, n}, 4));
      },
      {2, 3, 4, 8});
}

// Pipelined, each form of the 3-D product gathers its left operand in as many all-gathers as it has
// bands and reduce-scatters in as many reduce-scatters (never more than the rows of a strip, the finer
// of the two cuts of the product's rows), gathers its right operand once, whole, and moves on every
// axis the bytes the plain product moves.
TYPED_TEST(collective_matmul_test, pipelined_3d_products_move_what_the_plain_ones_move) {
  TypeParam::run(
      [](communicator auto& world) {
        process_mesh mesh(world, balanced_shape<3>(world.size()));
        const std::int64_t p = world.size();
        const auto& grid = mesh.shape();
        const std::int64_t m = 8 * p, k = 4 * p, n = 6 * p;
        const auto a = distributed<cube_3d<>::input, float>(mesh, serial({m, k}, 1));
        const auto b = distributed<cube_3d<>::weight, float>(mesh, serial({k, n}, 2));
        const auto dc = distributed<cube_3d<>::output, float>(mesh, serial({m, n}, 3));
        const auto moved = [&](auto&& product, int chunks) {
          const auto before = mesh.traffic();
          (void)product(matmul_options{.chunks = chunks});
          return (mesh.traffic() - before).axes;
        };
        // The paper's directions: A gathered over y (axis 1), B over x (0), the sums over z (2).
        const auto check = [&](const char* form, auto&& product, std::size_t left_axis, std::size_t scatter_axis,
                               std::int64_t strip_rows) {
          const auto single = moved(product, 1);
          for (const traffic_count& axis : single) EXPECT_EQ(axis.calls, 1) << form;
          for (const int chunks : {3, 4, 1000}) {
            const auto pipelined = moved(product, chunks);
            const std::int64_t bands = std::min<std::int64_t>(chunks, strip_rows);
            for (std::size_t axis = 0; axis < 3; ++axis) {
              SCOPED_TRACE(std::string(form) + ", chunks " + std::to_string(chunks) + ", axis " + std::to_string(axis));
              EXPECT_EQ(pipelined[axis].calls, axis == left_axis || axis == scatter_axis ? bands : 1);
              EXPECT_EQ(pipelined[axis].bytes_sent, single[axis].bytes_sent);
              EXPECT_EQ(pipelined[axis].bytes_received, single[axis].bytes_received);
            }
          }
        };
        // A·B and dC·Bᵀ cut rows of m over x, then over y and z (strips: the finer cut); Aᵀ·dC's rows are
        // A's columns, k cut over z.
        const std::int64_t m_strip_rows = m / (grid[0] * std::lcm(grid[1], grid[2]));
        check("A*B", [&](matmul_options o) { return matmul(a, b, o); }, 1, 2, m_strip_rows);
        check("dC*B^T", [&](matmul_options o) { return matmul(dc, transposed(b), o); }, 2, 1, m_strip_rows);
        check("A^T*dC", [&](matmul_options o) { return matmul(transposed(a), dc, o); }, 1, 0, k / grid[2]);
      },
      {1, 4, 8});
}

TYPED_TEST(collective_matmul_test, misuse_throws_naming_rank_and_values) {
  TypeParam::run(
      [](communicator auto& world) {
        process_mesh line(world, {world.size()});
        const auto x = distributed<col_1d<padded>>(line, serial({6, 5}, 1));
        const auto w = distributed<row_1d<padded>>(line, serial({4, 3}, 2));
        try {
          (void)all_gather_matmul(x, w);
          FAIL() << "a 6x5 times 4x3 ring was accepted";
        } catch (const argument_error& e) {
          EXPECT_EQ(e.rank(), world.world_rank());
          EXPECT_EQ(e.operation(), "all_gather_matmul");
          EXPECT_NE(std::string(e.what()).find("inner dimensions 5 and 4 differ"), std::string::npos) << e.what();
        }
        const auto h = distributed<row_1d<padded>>(line, serial({6, 5}, 3));
        const auto v = distributed<col_1d<padded>>(line, serial({4, 3}, 4));
        try {
          (void)matmul_reduce_scatter(h, v);
          FAIL() << "a 6x5 times 4x3 ring was accepted";
        } catch (const argument_error& e) {
          EXPECT_EQ(e.rank(), world.world_rank());
          EXPECT_EQ(std::string(e.what()).rfind("[rank " + std::to_string(world.world_rank()) +
                                                    "] matmul_reduce_scatter(row_1d<padded> 6x5, col_1d<padded> 4x3): "
                                                    "A*B of a 6x5 A and a 4x3 B",
                                                0),
                    0U)
              << e.what();
        }
        const auto dz = distributed<col_1d<padded>>(line, serial({6, 2}, 5));
        try {
          (void)all_gather_matmul_both_sides(transposed(h), dz, transposed(v));
          FAIL() << "a 5x6 times 6x2 times 3x4 ring was accepted";
        } catch (const argument_error& e) {
          EXPECT_EQ(e.rank(), world.world_rank());
          EXPECT_EQ(std::string(e.what()).rfind(
                        "[rank " + std::to_string(world.world_rank()) +
                            "] all_gather_matmul_both_sides(transposed(row_1d<padded> 6x5), col_1d<padded> 6x2, "
                            "transposed(col_1d<padded> 4x3)): A*B^T of a 6x2 A and a 4x3 B",
                        0),
                    0U)
              << e.what();
        }
        // The products to sum in one reduce-scatter must have one shape.
        const auto h_wider = distributed<row_1d<padded>>(line, serial({6, 4}, 3));
        const auto v_fits = distributed<col_1d<padded>>(line, serial({4, 3}, 4));
        const auto v_wider = distributed<col_1d<padded>>(line, serial({4, 5}, 4));
        try {
          (void)matmul_reduce_scatter(std::tie(h_wider, h_wider), std::tie(v_fits, v_wider));
          FAIL() << "a sum of a 6x3 and a 6x5 product was accepted";
        } catch (const argument_error& e) {
          EXPECT_EQ(e.rank(), world.world_rank());
          EXPECT_EQ(std::string(e.what()).rfind("[rank " + std::to_string(world.world_rank()) +
                                                    "] matmul_reduce_scatter(row_1d<padded> 6x4, col_1d<padded> 4x3; "
                                                    "row_1d<padded> 6x4, col_1d<padded> 4x5): the products to sum "
                                                    "are 6x3 and 6x5",
                                                0),
                    0U)
              << e.what();
        }
        // One call runs one form: automatic is a layer's choice over its calls.
        const auto w_fits = distributed<row_1d<padded>>(line, serial({5, 3}, 2));
        try {
          (void)all_gather_matmul(x, w_fits, collective_matmul_form::automatic);
          FAIL() << "a call in the automatic form was accepted";
        } catch (const argument_error& e) {
          EXPECT_EQ(e.rank(), world.world_rank());
          EXPECT_EQ(e.operation(), "all_gather_matmul");
          EXPECT_NE(std::string(e.what()).find("one call takes ring or unfused"), std::string::npos) << e.what();
        }
        process_mesh cube(world, balanced_shape<3>(world.size()));
        const auto a = distributed<cube_3d<directions<>, padded>::input>(cube, serial({6, 5}, 1));
        const auto b = distributed<cube_3d<directions<>, padded>::weight>(cube, serial({5, 3}, 2));
        try {
          (void)matmul(a, b, {.chunks = 0});
          FAIL() << "chunks = 0 was accepted";
        } catch (const argument_error& e) {
          EXPECT_EQ(e.rank(), world.world_rank());
          EXPECT_NE(std::string(e.what()).find("chunks is 0"), std::string::npos) << e.what();
        }
      },
      {1, 3, 4});
}

}  // namespace
