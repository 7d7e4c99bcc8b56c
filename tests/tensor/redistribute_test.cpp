// redistribute's three paths (tensor/exchange.hpp) on every backend. The path taken is seen in the
// collectives each of the mesh's communicators issued (a counting_communicator under the mesh), and
// every result is compared with the general all_to_all_v path and with the serial matrix:
//   no communication when the new layout adds mesh axes (rows_over<0> -> rows_over<0, 1>) or slices a
//   replicated matrix;
//   one all_gather along axis a when the new layout drops a, the last axis of a dimension's list, and
//   the pieces line up (exact; padded when the piece sizes match), for rows and for columns, on 1-D,
//   2-D and 3-D meshes, all_gather(t) included;
//   one all_to_all_v otherwise (a dropped axis that is not the last; padded or ragged pieces that do
//   not line up).
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "shardwise/layout/cube_3d.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/tensor/distribute.hpp"
#include "shardwise/tensor/dtensor.hpp"
#include "shardwise/tensor/exchange.hpp"
#include "support/backends.hpp"
#include "support/counting_communicator.hpp"

namespace {

using namespace shardwise;
using shardwise::testing::counting_communicator;
using matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <class Backend>
class redistribute_test : public ::testing::Test {};
TYPED_TEST_SUITE(redistribute_test, shardwise::testing::backends);

// Distinct, exactly representable values: any misplaced element shows.
double value(std::int64_t i, std::int64_t j) { return static_cast<double>(i * 1000 + j) + 0.25; }

template <class Tensor>
std::vector<double> storage(const Tensor& t) {
  return {t.data().begin(), t.data().end()};
}

enum class path { local, all_gather, all_to_all_v };

template <class Mesh>
void reset_counts(Mesh& mesh) {
  mesh.world().reset();
  for (std::size_t a = 0; a < Mesh::dimensions; ++a) mesh.axis(static_cast<int>(a)).reset();
}

// The collectives since reset_counts are those of `expected`: one all_to_all_v on the world, one
// all_gather on mesh axis `axis`, or none.
template <class Mesh>
void expect_path(Mesh& mesh, path expected, int axis) {
  const int world_calls = expected == path::all_to_all_v ? 1 : 0;
  EXPECT_EQ(mesh.world().total_calls(), world_calls);
  EXPECT_EQ(mesh.world().calls("all_to_all_v"), world_calls);
  for (int a = 0; a < static_cast<int>(Mesh::dimensions); ++a) {
    const int axis_calls = expected == path::all_gather && a == axis ? 1 : 0;
    EXPECT_EQ(mesh.axis(a).total_calls(), axis_calls) << "axis " << a;
    EXPECT_EQ(mesh.axis(a).calls("all_gather"), axis_calls) << "axis " << a;
  }
}

// A -> B takes `expected` (along `axis` for an all_gather) and gives what the general path gives, which
// is what the serial matrix holds.
template <class A, class B, class Mesh>
void check(Mesh& mesh, const matrix_extents& shape, path expected, int axis = -1) {
  SCOPED_TRACE("grid " + detail::shape_string(mesh.shape()) + ", matrix " + std::to_string(shape.rows) + "x" +
               std::to_string(shape.cols) + ", expected path " + std::to_string(static_cast<int>(expected)) +
               ", axis " + std::to_string(axis));
  const auto a = from_function<A>(mesh, shape, value);
  reset_counts(mesh);
  const auto b = redistribute<B>(a);
  expect_path(mesh, expected, axis);
  dtensor<double, B, Mesh> general(mesh, shape);
  detail::exchange_all_to_all(mesh.world(), a.mapping(), a.data(), general.mapping(), general.data(), "test");
  EXPECT_EQ(storage(b), storage(general));
  EXPECT_EQ(storage(b), storage(from_function<B>(mesh, shape, value)));
}

// Meshes of these sizes have every axis longer than 1, so each gather is a real one.
TYPED_TEST(redistribute_test, one_dimensional_paths) {
  TypeParam::run(
      [](communicator auto& world) {
        counting_communicator counted(world.split(0, world.rank()));
        process_mesh mesh(counted, {world.size()});
        const int p = world.size();
        const matrix_extents divisible{2 * p, 3 * p};
        check<col_1d<>, replicated<>>(mesh, divisible, path::all_gather, 0);
        check<row_1d<>, replicated<>>(mesh, divisible, path::all_gather, 0);
        check<row_1d<padded>, replicated<>>(mesh, {5, 7}, path::all_gather, 0);   // padded pieces always tile
        check<row_1d<ragged>, replicated<>>(mesh, {5, 7}, path::all_to_all_v);   // stored unequally
        check<replicated<>, col_1d<ragged>>(mesh, {7, 5}, path::local);
        check<col_1d<>, row_1d<>>(mesh, divisible, path::all_to_all_v);

        // all_gather(t) is the gather along axis 0 too.
        const auto t = from_function<col_1d<padded>>(mesh, {7, 5}, value);
        reset_counts(mesh);
        const matrix whole = all_gather(t);
        expect_path(mesh, path::all_gather, 0);
        EXPECT_TRUE(whole == matrix::NullaryExpr(7, 5, [](Eigen::Index i, Eigen::Index j) { return value(i, j); }));
      },
      {2, 3, 5, 8});
}

TYPED_TEST(redistribute_test, two_dimensional_paths) {
  TypeParam::run(
      [](communicator auto& world) {
        counting_communicator counted(world.split(0, world.rank()));
        process_mesh mesh(counted, balanced_shape<2>(world.size()));
        const int p = world.size();
        const matrix_extents divisible{2 * p, 3 * p};
        using rows_over_both = split<rows_over<0, 1>, cols_over<>>;
        using cols_over_both = split<rows_over<>, cols_over<0, 1>>;
        // Dropping the last axis of a dimension's list: an all_gather along it, rows or columns.
        check<rows_over_both, col_1d<>>(mesh, divisible, path::all_gather, 1);
        check<cols_over_both, row_1d<>>(mesh, divisible, path::all_gather, 1);
        check<block_2d<>, col_1d<>>(mesh, divisible, path::all_gather, 1);
        check<block_2d<>, split<rows_over<>, cols_over<1>>>(mesh, divisible, path::all_gather, 0);
        // A source replicated along one axis gathers along the other: the copies along the first do not
        // tile anything (each line along axis 0 below holds one column piece twice).
        check<split<rows_over<>, cols_over<1>>, replicated<>>(mesh, divisible, path::all_gather, 1);
        check<col_1d<>, replicated<>>(mesh, divisible, path::all_gather, 0);
        // Padded: with b = ceil(n / P), the pieces along axis 1 tile a piece of rows_over<0> when
        // p1 * b == ceil(n / p0): n = 2P - 1 does, n = 2P + 1 does not.
        using padded_rows_over_both = split<rows_over<0, 1>, cols_over<>, padded>;
        check<padded_rows_over_both, col_1d<padded>>(mesh, {2 * p - 1, 3}, path::all_gather, 1);
        check<padded_rows_over_both, col_1d<padded>>(mesh, {2 * p + 1, 3}, path::all_to_all_v);
        // Dropping the first axis of (0, 1): the pieces of one line are not contiguous.
        check<rows_over_both, split<rows_over<1>, cols_over<>>>(mesh, divisible, path::all_to_all_v);
        // Adding axes: each rank already holds its new block.
        check<col_1d<>, rows_over_both>(mesh, divisible, path::local);
        check<col_1d<padded>, block_2d<padded>>(mesh, {2 * p + 1, 5}, path::local);
        check<replicated<>, block_2d<ragged>>(mesh, {7, 5}, path::local);
      },
      {4, 6, 9});
}

TYPED_TEST(redistribute_test, three_dimensional_paths) {
  TypeParam::run(
      [](communicator auto& world) {
        counting_communicator counted(world.split(0, world.rank()));
        process_mesh mesh(counted, balanced_shape<3>(world.size()));
        const int p = world.size();
        const matrix_extents divisible{2 * p, 3 * p};
        using cube = cube_3d<>;  // input: rows over (x, y), columns over z; weight: rows over z, columns over (y, x)
        check<cube::input, split<rows_over<0>, cols_over<2>>>(mesh, divisible, path::all_gather, 1);
        check<cube::weight, split<rows_over<2>, cols_over<1>>>(mesh, divisible, path::all_gather, 0);
        check<split<rows_over<0>, cols_over<2>>, cube::input>(mesh, divisible, path::local);
        check<cube::input, cube::output>(mesh, divisible, path::all_to_all_v);
      },
      {8, 12, 27});  // 2x2x2, 3x2x2, 3x3x3
}

}  // namespace
