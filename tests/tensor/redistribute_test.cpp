// redistribute's paths (tensor/exchange.hpp, tensor/exchange_sum.hpp) on every backend. The path taken
// is seen in the collectives each of the mesh's communicators issued (a counting_communicator under the
// mesh), and every result is compared with the general all_to_all_v path and with the serial matrix:
//   no communication when the new layout adds mesh axes (rows_over<0> -> rows_over<0, 1>) or slices a
//   replicated matrix;
//   one all_gather along axis a when the new layout drops a, the last axis of a dimension's list, and
//   the pieces line up (exact; padded when the piece sizes match), for rows and for columns, on 1-D,
//   2-D and 3-D meshes, all_gather(t) included;
//   one all_to_all_v otherwise (a dropped axis that is not the last; padded or ragged pieces that do
//   not line up).
// Partial sums (partial_sum<L, axes...>) of 1-D, 2-D and 3-D layouts come out as the serial sum, in
// their split counterparts by one reduce_scatter along the pending axis the new layout cuts (an
// all_reduce along any other), and otherwise — into replicated, into L itself, pieces that do not tile —
// by an all_reduce along each pending axis and then the move.
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "shardwise/layout/cube_3d.hpp"
#include "shardwise/layout/layout_name.hpp"
#include "shardwise/layout/partial_sum.hpp"
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

// body(mesh, divisible) on a D-dimensional mesh of the world's P ranks (balanced_shape) whose
// communicators count their collectives; divisible is a 2P x 3P shape that every cut divides.
template <std::size_t D, class Body>
void on_counted_mesh(communicator auto& world, Body&& body) {
  counting_communicator counted(world.split(0, world.rank()));
  process_mesh mesh(counted, balanced_shape<D>(world.size()));
  body(mesh, matrix_extents{2 * world.size(), 3 * world.size()});
}

// Meshes of these sizes have every axis longer than 1, so each gather is a real one.
TYPED_TEST(redistribute_test, one_dimensional_paths) {
  TypeParam::run(
      [](communicator auto& world) {
        on_counted_mesh<1>(world, [](auto& mesh, const matrix_extents& divisible) {
          check<col_1d<>, replicated<>>(mesh, divisible, path::all_gather, 0);
          check<row_1d<>, replicated<>>(mesh, divisible, path::all_gather, 0);
          check<row_1d<padded>, replicated<>>(mesh, {5, 7}, path::all_gather, 0);  // padded pieces always tile
          check<row_1d<ragged>, replicated<>>(mesh, {5, 7}, path::all_to_all_v);   // stored unequally
          check<replicated<>, col_1d<ragged>>(mesh, {7, 5}, path::local);
          check<col_1d<>, row_1d<>>(mesh, divisible, path::all_to_all_v);

          // all_gather(t) is the gather along axis 0 too.
          const auto t = from_function<col_1d<padded>>(mesh, {7, 5}, value);
          reset_counts(mesh);
          const matrix whole = all_gather(t);
          expect_path(mesh, path::all_gather, 0);
          EXPECT_TRUE(whole == matrix::NullaryExpr(7, 5, [](Eigen::Index i, Eigen::Index j) { return value(i, j); }));
        });
      },
      {2, 3, 5, 8});
}

TYPED_TEST(redistribute_test, two_dimensional_paths) {
  TypeParam::run(
      [](communicator auto& world) {
        on_counted_mesh<2>(world, [](auto& mesh, const matrix_extents& divisible) {
          const int p = mesh.world().size();
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
        });
      },
      {4, 6, 9});
}

TYPED_TEST(redistribute_test, three_dimensional_paths) {
  TypeParam::run(
      [](communicator auto& world) {
        on_counted_mesh<3>(world, [](auto& mesh, const matrix_extents& divisible) {
          using cube = cube_3d<>;  // input: rows over (x, y), columns over z; weight: rows over z, columns over (y, x)
          check<cube::input, split<rows_over<0>, cols_over<2>>>(mesh, divisible, path::all_gather, 1);
          check<cube::weight, split<rows_over<2>, cols_over<1>>>(mesh, divisible, path::all_gather, 0);
          check<split<rows_over<0>, cols_over<2>>, cube::input>(mesh, divisible, path::local);
          check<cube::input, cube::output>(mesh, divisible, path::all_to_all_v);
        });
      },
      {8, 12, 27});  // 2x2x2, 3x2x2, 3x3x3
}

// The collectives on each of the mesh's communicators since reset_counts, by name.
struct collective_calls {
  std::map<std::string, int> world;
  std::vector<std::map<std::string, int>> axes;
};

template <class Mesh>
void expect_calls(Mesh& mesh, const collective_calls& expected) {
  const auto expect = [](auto& counted, const std::map<std::string, int>& calls, const std::string& where) {
    int total = 0;
    for (const auto& [name, count] : calls) {
      EXPECT_EQ(counted.calls(name), count) << name << " on " << where;
      total += count;
    }
    EXPECT_EQ(counted.total_calls(), total) << "collectives on " << where;
  };
  expect(mesh.world(), expected.world, "the world");
  for (std::size_t a = 0; a < Mesh::dimensions; ++a)
    expect(mesh.axis(static_cast<int>(a)), a < expected.axes.size() ? expected.axes[a] : std::map<std::string, int>{},
           "axis " + std::to_string(a));
}

// Addends of partial_sum<L, axes...>: on each rank value(i, j) times the product over the pending axes
// of (its coordinate there + 1), so that the sum is value(i, j) times the product of p (p + 1) / 2, exact
// in any order of summation.
template <class Partial, class Mesh>
double addend_factor(Mesh& mesh) {
  double factor = 1;
  for (const std::size_t a : Partial::pending_axes) factor *= mesh.coords()[a] + 1;
  return factor;
}
template <class Partial, class Mesh>
double sum_factor(Mesh& mesh) {
  double factor = 1;
  for (const std::size_t a : Partial::pending_axes) factor *= mesh.shape()[a] * (mesh.shape()[a] + 1) / 2.0;
  return factor;
}

// redistribute<To>(addends of Partial) holds the serial sum, padding zero, and issues `expected` (when
// given; shapes whose path depends on the grid leave it out).
template <class Partial, class To, class Mesh>
void check_sum(Mesh& mesh, const matrix_extents& shape, const std::optional<collective_calls>& expected) {
  SCOPED_TRACE("grid " + detail::shape_string(mesh.shape()) + ", matrix " + std::to_string(shape.rows) + "x" +
               std::to_string(shape.cols) + ", " + layout_name<Partial>() + " → " + layout_name<To>());
  const double mine = addend_factor<Partial>(mesh);
  const auto addends =
      from_function<Partial>(mesh, shape, [&](std::int64_t i, std::int64_t j) { return value(i, j) * mine; });
  reset_counts(mesh);
  const auto sums = redistribute<To>(addends);
  if (expected) expect_calls(mesh, *expected);
  const double total = sum_factor<Partial>(mesh);
  EXPECT_EQ(storage(sums), storage(from_function<To>(
                               mesh, shape, [&](std::int64_t i, std::int64_t j) { return value(i, j) * total; })));
}

// One reduce_scatter along `axis`, an all_reduce along each of `summed`.
collective_calls reduce_scatter_along(std::size_t axis, const std::vector<std::size_t>& summed = {}) {
  collective_calls calls{{}, std::vector<std::map<std::string, int>>(3)};
  calls.axes[axis]["reduce_scatter"] = 1;
  for (const std::size_t a : summed) calls.axes[a]["all_reduce"] = 1;
  return calls;
}
// An all_reduce along each of `summed`, then the move's collective: none, an all_gather along
// `gather_axis`, or (gather_axis -1 and to_all true) an all_to_all_v on the world.
collective_calls all_reduce_along(const std::vector<std::size_t>& summed, int gather_axis = -1, bool to_all = false) {
  collective_calls calls{{}, std::vector<std::map<std::string, int>>(3)};
  for (const std::size_t a : summed) calls.axes[a]["all_reduce"] = 1;
  if (gather_axis >= 0) calls.axes[static_cast<std::size_t>(gather_axis)]["all_gather"] = 1;
  if (to_all) calls.world["all_to_all_v"] = 1;
  return calls;
}

TYPED_TEST(redistribute_test, one_dimensional_partial_sums) {
  TypeParam::run(
      [](communicator auto& world) {
        on_counted_mesh<1>(world, [](auto& mesh, const matrix_extents& divisible) {
          using addends = partial_sum<replicated<>, 0>;  // the row-parallel product X·W before its sum
          check_sum<addends, col_1d<>>(mesh, divisible, reduce_scatter_along(0));
          check_sum<addends, row_1d<>>(mesh, divisible, reduce_scatter_along(0));
          check_sum<addends, col_1d<padded>>(mesh, {7, 5}, reduce_scatter_along(0));  // padded pieces always tile
          check_sum<addends, row_1d<padded>>(mesh, {5, 7}, reduce_scatter_along(0));
          check_sum<addends, col_1d<ragged>>(mesh, {7, 5}, all_reduce_along({0}));  // stored unequally
          check_sum<addends, replicated<>>(mesh, divisible, all_reduce_along({0}));
          check_sum<addends, col_1d<padded>>(mesh, {1, 3}, reduce_scatter_along(0));  // fewer rows than ranks
        });
      },
      {2, 3, 4, 8});
}

TYPED_TEST(redistribute_test, two_dimensional_partial_sums) {
  TypeParam::run(
      [](communicator auto& world) {
        on_counted_mesh<2>(world, [](auto& mesh, const matrix_extents& divisible) {
          const int p = mesh.world().size();
          using rows_cut = partial_sum<col_1d<>, 1>;                          // rows over axis 0, summed over 1
          using cols_cut = partial_sum<split<rows_over<>, cols_over<1>>, 0>;  // columns over axis 1, summed over 0
          check_sum<rows_cut, block_2d<>>(mesh, divisible, reduce_scatter_along(1));
          check_sum<cols_cut, block_2d<>>(mesh, divisible, reduce_scatter_along(0));
          check_sum<rows_cut, split<rows_over<0, 1>, cols_over<>>>(mesh, divisible, reduce_scatter_along(1));
          // Axis 1 first in the rows' list: the pieces along it are not contiguous.
          check_sum<rows_cut, split<rows_over<1, 0>, cols_over<>>>(mesh, divisible, all_reduce_along({1}, -1, true));
          check_sum<rows_cut, replicated<>>(mesh, divisible, all_reduce_along({1}, 0));
          check_sum<rows_cut, col_1d<>>(mesh, divisible, all_reduce_along({1}));  // what reduce(t) gives
          // Two pending axes: a reduce-scatter along the one the new layout cuts when it replicates along
          // the other; else two all-reduces.
          using both = partial_sum<replicated<>, 0, 1>;
          check_sum<both, col_1d<>>(mesh, divisible, reduce_scatter_along(0, {1}));
          check_sum<both, split<rows_over<>, cols_over<1>>>(mesh, divisible, reduce_scatter_along(1, {0}));
          check_sum<both, block_2d<>>(mesh, divisible, all_reduce_along({0, 1}));
          using block_2d_padded = block_2d<padded>;
          check_sum<partial_sum<col_1d<padded>, 1>, block_2d_padded>(mesh, {2 * p + 1, 5}, std::nullopt);
          check_sum<partial_sum<col_1d<ragged>, 1>, block_2d<ragged>>(mesh, {7, 2 * p - 1}, std::nullopt);
        });
      },
      {4, 6, 9});
}

// The 3-D product's local results before its reduce-scatter, for its three forms (cube_3d<>: a = y = 1,
// b = x = 0, c = z = 2), come out in the forms' result layouts by that reduce-scatter.
TYPED_TEST(redistribute_test, three_dimensional_partial_sums) {
  TypeParam::run(
      [](communicator auto& world) {
        on_counted_mesh<3>(world, [](auto& mesh, const matrix_extents& divisible) {
          using cube = cube_3d<>;
          using product = partial_sum<split<rows_over<0>, cols_over<1>>, 2>;          // C = A·B, summed along z
          using input_gradient = partial_sum<split<rows_over<0>, cols_over<2>>, 1>;   // dA, along y
          using weight_gradient = partial_sum<split<rows_over<2>, cols_over<1>>, 0>;  // dB, along x
          check_sum<product, cube::output>(mesh, divisible, reduce_scatter_along(2));
          check_sum<input_gradient, cube::input>(mesh, divisible, reduce_scatter_along(1));
          check_sum<weight_gradient, cube::weight>(mesh, divisible, reduce_scatter_along(0));
          check_sum<product, replicated<>>(mesh, divisible, all_reduce_along({2}, -1, true));
          using padded_cube = cube_3d<directions<>, padded>;
          using padded_product = partial_sum<split<rows_over<0>, cols_over<1>, padded>, 2>;
          check_sum<padded_product, padded_cube::output>(mesh, {13, 7}, std::nullopt);
          check_sum<padded_product, padded_cube::output>(mesh, divisible, reduce_scatter_along(2));
        });
      },
      {8, 12, 27});  // 2x2x2, 3x2x2, 3x3x3
}

}  // namespace
