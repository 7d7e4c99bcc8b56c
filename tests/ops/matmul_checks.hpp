#pragma once
// What the product tests share: reproducible operands, the comparison of a distributed result with
// serial Eigen (values and stored blocks, padding included), and the finite-difference check of the
// gradient forms.
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "shardwise/layout/layout.hpp"
#include "shardwise/ops/matmul.hpp"
#include "shardwise/tensor/distribute.hpp"
#include "shardwise/tensor/dtensor.hpp"
#include "shardwise/tensor/reduce.hpp"

namespace shardwise::testing {

using matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Entries in [-1, 1), different for each seed, the same on every rank.
inline double entry(int seed, std::int64_t i, std::int64_t j) {
  const std::int64_t mixed = (i * 7919 + j * 104729 + seed * 1299709) % 2003;
  return static_cast<double>(mixed) / 1001.5 - 1.0;
}

inline matrix serial(matrix_extents shape, int seed) {
  matrix m(shape.rows, shape.cols);
  for (std::int64_t i = 0; i < shape.rows; ++i)
    for (std::int64_t j = 0; j < shape.cols; ++j) m(i, j) = entry(seed, i, j);
  return m;
}

template <class Layout, class T = double, class Mesh>
auto distributed(Mesh& mesh, const matrix& whole) {
  return from_function<Layout>(mesh, {whole.rows(), whole.cols()},
                               [&](std::int64_t i, std::int64_t j) { return static_cast<T>(whole(i, j)); });
}

// A partial sum reduced; a final tensor as it is.
template <class T, class Layout, class Mesh>
auto final_value(const dtensor<T, Layout, Mesh>& t) {
  if constexpr (is_partial_sum_v<Layout>) {
    return reduce(t);
  } else {
    return t;
  }
}

// The whole result equals `expected` within `tolerance` (relative to its largest entry, absolute when
// that is below 1; 0 asks for equality), and every stored block holds what the layout gives this rank
// of `expected`, with zero padding.
template <class T, class Layout, class Mesh>
void expect_equals_serial(const dtensor<T, Layout, Mesh>& t, const matrix& expected, double tolerance = 1e-12) {
  const auto reference = distributed<Layout, T>(t.mesh(), expected);
  const auto largest = [](const matrix& m) { return m.size() == 0 ? 0.0 : m.cwiseAbs().maxCoeff(); };
  const double scale = std::max(1.0, largest(expected)) * tolerance;
  ASSERT_EQ(t.extents(), reference.extents());
  const matrix whole = all_gather(t).template cast<double>();
  EXPECT_LE(largest(whole - expected), scale);
  ASSERT_EQ(t.data().size(), reference.data().size());
  for (std::size_t k = 0; k < t.data().size(); ++k)
    ASSERT_NEAR(static_cast<double>(t.data()[k]), static_cast<double>(reference.data()[k]), scale)
        << "stored element " << k << " of this rank's block";
}

// loss(A, B) = sum(C ∘ R) with C = A·B; the gradient forms give dA = R·Bᵀ and dB = Aᵀ·R. Both are
// compared with central differences of the distributed forward product, element by element, and the
// gradients come back in their operands' layouts.
template <class LeftLayout, class RightLayout, class Mesh>
void check_gradients_by_finite_differences(Mesh& mesh, std::int64_t m, std::int64_t k, std::int64_t n) {
  const matrix a = serial({m, k}, 11);
  const matrix b = serial({k, n}, 12);
  const auto forward = [&](const matrix& left, const matrix& right) {
    return final_value(matmul(distributed<LeftLayout>(mesh, left), distributed<RightLayout>(mesh, right)));
  };
  using result_layout = typename decltype(forward(a, b))::layout_type;
  const matrix weights = serial({m, n}, 13);
  const auto r = distributed<result_layout>(mesh, weights);
  const auto left_tensor = distributed<LeftLayout>(mesh, a);
  const auto right_tensor = distributed<RightLayout>(mesh, b);
  const auto da = final_value(matmul(r, transposed(right_tensor)));
  const auto db = final_value(matmul(transposed(left_tensor), r));
  static_assert(std::is_same_v<typename decltype(da)::layout_type, LeftLayout>, "dA comes in A's layout");
  static_assert(std::is_same_v<typename decltype(db)::layout_type, RightLayout>, "dB comes in B's layout");
  const matrix da_whole = all_gather(da);
  const matrix db_whole = all_gather(db);

  const auto loss = [&](const matrix& left, const matrix& right) {
    return all_gather(forward(left, right)).cwiseProduct(weights).sum();
  };
  constexpr double step = 1e-3;
  auto central_difference = [&](matrix& perturbed, std::int64_t i, std::int64_t j, bool of_left) {
    const double kept = perturbed(i, j);
    perturbed(i, j) = kept + step;
    const double up = of_left ? loss(perturbed, b) : loss(a, perturbed);
    perturbed(i, j) = kept - step;
    const double down = of_left ? loss(perturbed, b) : loss(a, perturbed);
    perturbed(i, j) = kept;
    return (up - down) / (2 * step);
  };
  matrix left = a;
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < k; ++j)
      EXPECT_NEAR(da_whole(i, j), central_difference(left, i, j, true), 1e-8) << "dA(" << i << ", " << j << ")";
  matrix right = b;
  for (std::int64_t i = 0; i < k; ++i)
    for (std::int64_t j = 0; j < n; ++j)
      EXPECT_NEAR(db_whole(i, j), central_difference(right, i, j, false), 1e-8) << "dB(" << i << ", " << j << ")";
}

}  // namespace shardwise::testing
