#pragma once
// What the sources of the redistribute test share: the typed test suite, the check that a redistribution
// takes the path expected of it (the collectives a counting_communicator under the mesh saw) and agrees
// with the general path and the serial matrix, and the same for partial sums. The tests on 2-D and on
// 3-D meshes compile in sources of their own (redistribute_2d_test.cpp, redistribute_3d_test.cpp), since
// each mesh dimension's redistributions are instantiations of their own.
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "shardwise/layout/layout.hpp"
#include "shardwise/layout/layout_name.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/mesh/shape.hpp"
#include "shardwise/tensor/distribute.hpp"
#include "shardwise/tensor/dtensor.hpp"
#include "shardwise/tensor/exchange.hpp"
#include "support/backends.hpp"
#include "support/counting_communicator.hpp"

namespace shardwise::testing {

using matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <class Backend>
class redistribute_test : public ::testing::Test {};
TYPED_TEST_SUITE(redistribute_test, shardwise::testing::backends);

// Distinct, exactly representable values: any misplaced element shows.
inline double value(std::int64_t i, std::int64_t j) { return static_cast<double>(i * 1000 + j) + 0.25; }

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
// all_gather on mesh axis `axis` (on the world, over all the axes at once, for axis -1), or none.
template <class Mesh>
void expect_path(Mesh& mesh, path expected, int axis) {
  const bool on_the_world = expected == path::all_to_all_v || (expected == path::all_gather && axis < 0);
  EXPECT_EQ(mesh.world().total_calls(), on_the_world ? 1 : 0);
  EXPECT_EQ(mesh.world().calls(expected == path::all_gather ? "all_gather" : "all_to_all_v"), on_the_world ? 1 : 0);
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
  SCOPED_TRACE("grid " + shape_string(mesh.shape()) + ", matrix " + std::to_string(shape.rows) + "x" +
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
// given; shapes whose path depends on the grid leave it out), of addends the caller keeps (which it leaves
// as they were) and of a temporary; into the addends' final layout, the temporary's sum is taken in its
// own storage, which the result keeps.
template <class Partial, class To, class Mesh>
void check_sum(Mesh& mesh, const matrix_extents& shape, const std::optional<collective_calls>& expected) {
  SCOPED_TRACE("grid " + shape_string(mesh.shape()) + ", matrix " + std::to_string(shape.rows) + "x" +
               std::to_string(shape.cols) + ", " + layout_name<Partial>() + " → " + layout_name<To>());
  const double mine = addend_factor<Partial>(mesh);
  const auto make_addends = [&] {
    return from_function<Partial>(mesh, shape, [&](std::int64_t i, std::int64_t j) { return value(i, j) * mine; });
  };
  const double total = sum_factor<Partial>(mesh);
  const auto serial_sums =
      storage(from_function<To>(mesh, shape, [&](std::int64_t i, std::int64_t j) { return value(i, j) * total; }));

  const auto kept = make_addends();
  reset_counts(mesh);
  const auto sums = redistribute<To>(kept);
  if (expected) expect_calls(mesh, *expected);
  EXPECT_EQ(storage(sums), serial_sums);
  EXPECT_EQ(storage(kept), storage(make_addends())) << "the addends the caller keeps changed";

  auto temporary = make_addends();
  const auto* const storage_of_addends = temporary.data().data();
  reset_counts(mesh);
  const auto sums_of_temporary = redistribute<To>(std::move(temporary));
  if (expected) expect_calls(mesh, *expected);
  EXPECT_EQ(storage(sums_of_temporary), serial_sums);
  EXPECT_EQ(sums_of_temporary.data().data() == storage_of_addends, (std::is_same_v<To, typename Partial::final_layout>))
      << "the sum of a temporary in its final layout is taken in the addends' storage, and only there";
}

// The copies redistribute<To>(tensor) makes on this rank between the tensors' storage and its
// collectives' buffers (kernels named "redistribute copy"): none when the collectives read and write
// the tensors' storage where it is.
template <class To, class Mesh, class Tensor>
int copies(Mesh& mesh, Tensor&& tensor) {
  reset_counts(mesh);
  (void)redistribute<To>(std::forward<Tensor>(tensor));
  return mesh.world().kernels("redistribute copy");
}

// One reduce_scatter along `axis`, an all_reduce along each of `summed`.
inline collective_calls reduce_scatter_along(std::size_t axis, const std::vector<std::size_t>& summed = {}) {
  collective_calls calls{{}, std::vector<std::map<std::string, int>>(3)};
  calls.axes[axis]["reduce_scatter"] = 1;
  for (const std::size_t a : summed) calls.axes[a]["all_reduce"] = 1;
  return calls;
}
// One reduce_scatter over all the mesh's axes at once, on the world.
inline collective_calls reduce_scatter_over_the_world() {
  collective_calls calls{{}, std::vector<std::map<std::string, int>>(3)};
  calls.world["reduce_scatter"] = 1;
  return calls;
}
// One all_reduce over all the mesh's axes at once, on the world, then a local move.
inline collective_calls all_reduce_over_the_world() {
  collective_calls calls{{}, std::vector<std::map<std::string, int>>(3)};
  calls.world["all_reduce"] = 1;
  return calls;
}
// An all_reduce along each of `summed`, then the move's collective: none, an all_gather along
// `gather_axis`, or (gather_axis -1 and to_all true) an all_to_all_v on the world.
inline collective_calls all_reduce_along(const std::vector<std::size_t>& summed, int gather_axis = -1,
                                         bool to_all = false) {
  collective_calls calls{{}, std::vector<std::map<std::string, int>>(3)};
  for (const std::size_t a : summed) calls.axes[a]["all_reduce"] = 1;
  if (gather_axis >= 0) calls.axes[static_cast<std::size_t>(gather_axis)]["all_gather"] = 1;
  if (to_all) calls.world["all_to_all_v"] = 1;
  return calls;
}

}  // namespace shardwise::testing
