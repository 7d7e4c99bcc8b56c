#pragma once
// What the sources of the dtensor test share: the typed test suite, the matrix and shapes it distributes,
// and the round trips (scatter, gather, all_gather, from_function) and redistributions of a list of
// layouts, every ordered pair of them. Each layout and each pair is an instantiation of its own, so the
// round trips on 1-D meshes compile in a source of their own (dtensor_1d_test.cpp), and so do those on
// 3-D meshes (dtensor_3d_test.cpp); the long lists of layouts on 2-D and 3-D meshes compile apart from
// their tests, in dtensor_layouts_2d.cpp and dtensor_layouts_3d.cpp (`extern template` below). Every
// source defines SHARDWISE_CHECK_LAYOUTS before any include, so that the library's inline functions are
// the same in each.
#ifndef SHARDWISE_CHECK_LAYOUTS
#error "define SHARDWISE_CHECK_LAYOUTS 1 before any include in the dtensor test's sources"
#endif
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <cstdint>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "shardwise/layout/block_cyclic_2d.hpp"
#include "shardwise/layout/cube_3d.hpp"
#include "shardwise/layout/layout.hpp"
#include "shardwise/layout/padding.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/mesh/shape.hpp"
#include "shardwise/tensor/distribute.hpp"
#include "shardwise/tensor/dtensor.hpp"
#include "support/backends.hpp"

namespace shardwise::testing {

using matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// 1..9 ranks make 1-D meshes of every size up to 9, 2-D 2x2 and 3x3 and rectangular grids; the 3-D
// tests add 27 ranks, the 3x3x3 cube.
inline constexpr std::initializer_list<int> rank_counts = {1, 2, 3, 4, 5, 6, 7, 8, 9};

template <class Backend>
class dtensor_test : public ::testing::Test {};
TYPED_TEST_SUITE(dtensor_test, shardwise::testing::backends);

// Distinct, exactly representable values: any misplaced element shows.
inline double value(std::int64_t i, std::int64_t j) { return static_cast<double>(i * 1000 + j) + 0.25; }

inline matrix whole(const matrix_extents& shape) {
  matrix m(shape.rows, shape.cols);
  for (std::int64_t i = 0; i < shape.rows; ++i)
    for (std::int64_t j = 0; j < shape.cols; ++j) m(i, j) = value(i, j);
  return m;
}

inline std::vector<matrix_extents> shapes() {
  std::vector<matrix_extents> result{{1, 1}, {13, 7}, {5, 24}};
  std::mt19937 generator(3);
  std::uniform_int_distribution<std::int64_t> extent(1, 30);
  for (int k = 0; k < 2; ++k) result.push_back({extent(generator), extent(generator)});
  return result;
}

template <class Tensor>
void expect_blocks_hold_values(const Tensor& t) {
  for (int b = 0; b < t.block_count(); ++b) {
    const block_info& info = t.block(b);
    const auto local = t.local(b);
    for (std::int64_t r = 0; r < info.rows; ++r)
      for (std::int64_t c = 0; c < info.cols; ++c)
        ASSERT_EQ(local(r, c), value(info.row_offset + r, info.col_offset + c))
            << "block " << b << " (" << r << ", " << c << ")";
  }
}

template <class Tensor>
std::vector<double> storage(const Tensor& t) {
  return {t.data().begin(), t.data().end()};
}

// scatter / gather / all_gather / from_function for one layout.
template <class Layout, class Mesh>
void check_round_trip(Mesh& mesh, const matrix_extents& shape) {
  const int root = mesh.world().size() - 1;
  const bool at_root = mesh.world().rank() == root;
  const matrix expected = whole(shape);
  const auto t = scatter<Layout>(mesh, at_root ? expected : matrix{}, root);
  EXPECT_EQ(t.extents(), shape);
  expect_blocks_hold_values(t);
  const matrix back = gather(t, root);
  if (at_root) {
    EXPECT_TRUE(back == expected);  // EXPECT_EQ would print Eigen matrices as ranges
  } else {
    EXPECT_EQ(back.size(), 0);
  }
  EXPECT_TRUE(all_gather(t) == expected);
  const auto made = from_function<Layout>(mesh, shape, value);
  EXPECT_EQ(storage(made), storage(t));  // padding included: zero in both
}

// A -> B gives B's blocks; B -> A gives A's blocks back.
template <class A, class B, class Mesh>
void check_redistribute(Mesh& mesh, const matrix_extents& shape) {
  const auto a = from_function<A>(mesh, shape, value);
  const auto b = redistribute<B>(a);
  EXPECT_EQ(storage(b), storage(from_function<B>(mesh, shape, value)));
  EXPECT_EQ(storage(redistribute<A>(b)), storage(a));
}

template <class... Layouts>
struct layouts {};

template <class A, class Mesh, class... Bs>
void check_redistribute_from(Mesh& mesh, const matrix_extents& shape) {
  (check_redistribute<A, Bs>(mesh, shape), ...);
}

template <class Mesh, class... Ls>
void check_layouts(Mesh& mesh, const matrix_extents& shape, layouts<Ls...>) {
  const std::string trace = "grid " + shape_string(mesh.shape()) + ", matrix " + std::to_string(shape.rows) + "x" +
                            std::to_string(shape.cols);
  SCOPED_TRACE(trace);
  (check_round_trip<Ls>(mesh, shape), ...);
  (check_redistribute_from<Ls, Mesh, Ls...>(mesh, shape), ...);  // every ordered pair
}

inline matrix_extents divisible(const matrix_extents& shape, int ranks) {
  return {shape.rows * ranks, shape.cols * ranks};
}

// The layouts the round trips on 2-D meshes check on every shape, compiled in dtensor_layouts_2d.cpp.
using layouts_2d = layouts<block_2d<ragged>, block_2d<padded>, col_1d<ragged>, replicated<>, block_cyclic_2d<2, 3>,
                           split<rows_over<1, 0>, cols_over<>, padded>>;
extern template void check_layouts(process_mesh<backend::communicator_type, 2>&, const matrix_extents&, layouts_2d);

// The layouts the round trips on 3-D meshes check on every shape: the 3-D paper's cube_3d layouts
// (padded) and ragged cube_3d's; compiled in dtensor_layouts_3d.cpp.
using paper_cube = cube_3d<directions<>, padded>;
using ragged_cube = cube_3d<directions<>, ragged>;
using layouts_3d = layouts<paper_cube::input, paper_cube::weight, paper_cube::output, ragged_cube::input,
                           ragged_cube::weight, replicated<>>;
extern template void check_layouts(process_mesh<backend::communicator_type, 3>&, const matrix_extents&, layouts_3d);

}  // namespace shardwise::testing
