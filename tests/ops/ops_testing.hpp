#pragma once
// Shared by the tests of ops/: the layout families on the meshes that P ranks form, random matrices,
// and the comparison of a distributed result with the serial Eigen one on the full matrix.
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "shardwise/layout/cube_3d.hpp"
#include "shardwise/layout/padding.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/tensor/distribute.hpp"
#include "shardwise/tensor/dtensor.hpp"

namespace shardwise::ops_testing {

using matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Rank counts of the tests: 1-D meshes of each; 2-D 2x2 and 3x3 (4, 9); 3-D 1x1x1, 1x2x2 and 2x2x2.
inline constexpr std::initializer_list<int> rank_counts = {1, 3, 4, 8, 9};

// Values in [-2, 2], the same on every rank for one seed.
inline matrix random_matrix(const matrix_extents& shape, unsigned seed) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<double> value(-2.0, 2.0);
  matrix m(shape.rows, shape.cols);
  for (auto& element : m.reshaped()) element = value(generator);
  return m;
}

template <class Layout, class Mesh>
auto distribute(Mesh& mesh, const matrix& whole) {
  return from_function<Layout>(mesh, {whole.rows(), whole.cols()},
                               [&](std::int64_t i, std::int64_t j) { return whole(i, j); });
}

// The distributed result, gathered on rank 0, is `expected` within `tolerance` there; and each rank's
// storage is `expected` cut by the same layout, padding included (so padding is zero). Collective.
template <class Tensor>
void expect_near(const Tensor& result, const matrix& expected, double tolerance, std::string_view what) {
  using layout = typename Tensor::layout_type;
  SCOPED_TRACE(std::string(what));
  const matrix gathered = gather(result, 0);
  const auto reference = distribute<layout>(result.mesh(), expected);
  if (result.mesh().world().rank() == 0) {
    ASSERT_EQ(gathered.rows(), expected.rows());
    ASSERT_EQ(gathered.cols(), expected.cols());
    if (expected.size() > 0) {
      EXPECT_LE((gathered - expected).cwiseAbs().maxCoeff(), tolerance);
    }
  }
  ASSERT_EQ(result.data().size(), reference.data().size());
  for (std::size_t k = 0; k < result.data().size(); ++k)
    EXPECT_NEAR(result.data()[k], reference.data()[k], tolerance) << "stored element " << k;
}

template <class... Layouts>
struct layouts {};

// Calls check(mesh) on each mesh the world's P ranks form: 1-D {P}; 2-D {q, q} when P = q², q > 1;
// 3-D {1, 1, 1}, {1, 2, 2} or {2, 2, 2} when P is 1, 4 or 8.
template <class Communicator, class Check>
void for_every_mesh(Communicator& world, Check&& check) {
  const int p = world.size();
  {
    process_mesh mesh(world, {p});
    check(mesh);
  }
  const int q = static_cast<int>(std::lround(std::sqrt(p)));
  if (q > 1 && q * q == p) {
    process_mesh mesh(world, {q, q});
    check(mesh);
  }
  if (p == 1 || p == 4 || p == 8) {
    process_mesh mesh(world, {p == 8 ? 2 : 1, p == 1 ? 1 : 2, p == 1 ? 1 : 2});
    check(mesh);
  }
}

// Calls check.template operator()<L>(mesh, shape) for each layout family on every mesh, on shapes that
// do not divide the grid (padded and ragged rules) and one that does (exact):
//   1-D: replicated, row_1d, col_1d;  2-D: block_2d;  3-D: the cube's input, output and weight.
template <class Communicator, class Check>
void for_every_family(Communicator& world, Check&& check) {
  const int p = world.size();
  const std::vector<matrix_extents> uneven{{7, 11}, {5, 12}, {2, 3}};
  const matrix_extents even{2 * p, 3 * p};
  auto run = [&]<class... Ls>(auto& mesh, layouts<Ls...>, const matrix_extents& shape) {
    SCOPED_TRACE("grid " + shape_string(mesh.shape()) + ", matrix " + std::to_string(shape.rows) + "x" +
                 std::to_string(shape.cols));
    (check.template operator()<Ls>(mesh, shape), ...);
  };
  for_every_mesh(world, [&]<class Mesh>(Mesh& mesh) {
    if constexpr (Mesh::dimensions == 1) {
      for (const auto& shape : uneven)
        run(mesh, layouts<replicated<padded>, row_1d<padded>, col_1d<padded>, row_1d<ragged>, col_1d<ragged>>{}, shape);
      run(mesh, layouts<replicated<>, row_1d<>, col_1d<>>{}, even);
    } else if constexpr (Mesh::dimensions == 2) {
      for (const auto& shape : uneven) run(mesh, layouts<block_2d<padded>, block_2d<ragged>>{}, shape);
      run(mesh, layouts<block_2d<>>{}, even);
    } else {
      using padded_cube = cube_3d<directions<>, padded>;
      using ragged_cube = cube_3d<directions<>, ragged>;
      for (const auto& shape : uneven)
        run(mesh,
            layouts<padded_cube::input, padded_cube::output, padded_cube::weight, ragged_cube::input,
                    ragged_cube::output>{},
            shape);
      run(mesh, layouts<cube_3d<>::input, cube_3d<>::output, cube_3d<>::weight>{}, even);
    }
  });
}

// for_every_family's calls on the mesh of `Dimensions` dimensions only (1: replicated, row_1d, col_1d;
// 2: block_2d; 3: the cube's layouts) and, if padding rules are given, with the layouts of those rules only
// (exact on the shape that divides the grid, padded and ragged on the others): so that a test can compile
// its checks of each family, or part of one, in a source of its own. It builds every mesh for_every_family
// builds.
template <std::size_t Dimensions, padding_rule... Paddings, class Communicator, class Check>
void for_family(Communicator& world, Check&& check) {
  for_every_family(world, [&]<class Layout, class Mesh>(Mesh& mesh, const matrix_extents& shape) {
    if constexpr (Mesh::dimensions == Dimensions &&
                  (sizeof...(Paddings) == 0 || (std::is_same_v<typename Layout::padding, Paddings> || ...)))
      check.template operator()<Layout>(mesh, shape);
  });
}

// Layouts that cut the columns, so that row statistics cross ranks, for the finite-difference checks:
// over one axis (1-D row_1d, 2-D block_2d) and over one and two axes of the cube (input; weight, whose
// columns are cut over (y, x)), on every mesh. Calls check.template operator()<L>(mesh).
template <class Communicator, class Check>
void for_column_cutting_layouts(Communicator& world, Check&& check) {
  for_every_mesh(world, [&]<class Mesh>(Mesh& mesh) {
    if constexpr (Mesh::dimensions == 1) {
      check.template operator()<row_1d<padded>>(mesh);
    } else if constexpr (Mesh::dimensions == 2) {
      check.template operator()<block_2d<ragged>>(mesh);
    } else {
      check.template operator()<cube_3d<directions<>, padded>::input>(mesh);
      check.template operator()<cube_3d<directions<>, ragged>::weight>(mesh);
    }
  });
}

// Σ weights ∘ result over the whole matrix, the same on every rank (gathered on rank 0, shared).
template <class Tensor>
double weighted_sum(const Tensor& result, const matrix& weights) {
  const matrix whole = gather(result, 0);
  double sum = result.mesh().world().rank() == 0 ? whole.cwiseProduct(weights).sum() : 0.0;
  result.mesh().world().broadcast(std::span<double>(&sum, 1), 0);
  return sum;
}

// Central differences of loss at `at`, one element at a time.
template <class Loss>
matrix finite_differences(const matrix& at, Loss&& loss) {
  constexpr double step = 1e-6;
  matrix gradient(at.rows(), at.cols());
  for (std::int64_t i = 0; i < at.rows(); ++i)
    for (std::int64_t j = 0; j < at.cols(); ++j) {
      matrix plus = at;
      matrix minus = at;
      plus(i, j) += step;
      minus(i, j) -= step;
      gradient(i, j) = (loss(plus) - loss(minus)) / (2 * step);
    }
  return gradient;
}

}  // namespace shardwise::ops_testing
