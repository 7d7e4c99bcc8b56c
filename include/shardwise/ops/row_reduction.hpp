#pragma once
// Reductions along the rows of a distributed matrix. A rank holds part of each of its rows when the
// layout cuts the columns; the other parts are on the ranks that differ from it only along the column
// axes, so a per-row sum or maximum is the local one, all-reduced along each of those axes. Softmax
// and layer norm (ops/softmax.hpp, ops/layer_norm.hpp) build their row statistics from these.
//
//   const auto x = t.local();
//   Eigen::VectorXf maxima = row_maxima<Layout>(t.mesh(), x);       // one per local row, on every sharer
//   Eigen::VectorXf sums = row_sums<Layout>(t.mesh(), (x.colwise() - maxima).array().exp());
//
// Collective over the column axes. Each argument is this rank's block (or an expression of it) with
// only owned columns, as local() shows it: padding never counts. The local reduction is one kernel
// (core/kernel.hpp) reading `tensors_read` elements per element of the argument, one operation each.
#include <Eigen/Core>
#include <cstddef>
#include <limits>
#include <span>

#include "shardwise/comm/reduction.hpp"
#include "shardwise/core/element.hpp"
#include "shardwise/core/kernel.hpp"
#include "shardwise/layout/vector_layout.hpp"

namespace shardwise {

template <class Scalar>
using row_values = Eigen::Matrix<Scalar, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;

// Combines `values` (any per-row quantities, rows x k, column-major) with `reduction` across the ranks
// that share this rank's rows. Every sharer holds the same rows, so the buffers agree in size.
template <split_layout Layout, class Mesh, class Scalar>
void combine_across_row(Mesh& mesh, row_values<Scalar>& values, op reduction) {
  const std::span<Scalar> buffer(values.data(), static_cast<std::size_t>(values.size()));
  for (const std::size_t a : Layout::col_axes) mesh.axis(static_cast<int>(a)).all_reduce(buffer, reduction);
}

namespace detail {
// The work of reducing each row of `local` to one value.
template <class Derived>
[[nodiscard]] work row_reduction_work(const Eigen::DenseBase<Derived>& local, int tensors_read) {
  const auto elements = static_cast<double>(local.size());
  const double element = sizeof(typename Derived::Scalar);
  return {elements, element * (tensors_read * elements + static_cast<double>(local.rows()))};
}
}  // namespace detail

// The sums are of the elements' accumulator type (float for bf16 elements).
template <split_layout Layout, class Mesh, class Derived>
[[nodiscard]] Eigen::Matrix<accumulator_t<typename Derived::Scalar>, Eigen::Dynamic, 1> row_sums(
    Mesh& mesh, const Eigen::DenseBase<Derived>& local, int tensors_read = 1) {
  using Sum = accumulator_t<typename Derived::Scalar>;
  // Sized before the kernel, which may not run (shapes-only simulation): the size is what moves on.
  row_values<Sum> sums(local.rows(), 1);
  run_kernel(mesh.world(), detail::row_reduction_work(local, tensors_read), "row sums",
             [&] { sums = local.template cast<Sum>().rowwise().sum(); });
  combine_across_row<Layout>(mesh, sums, op::sum);
  return sums;
}

template <split_layout Layout, class Mesh, class Derived>
[[nodiscard]] Eigen::Matrix<typename Derived::Scalar, Eigen::Dynamic, 1> row_maxima(
    Mesh& mesh, const Eigen::DenseBase<Derived>& local) {
  using Scalar = typename Derived::Scalar;
  // A rank may own no columns (the last pieces of a padded cut): it contributes the identity of max.
  row_values<Scalar> maxima(local.rows(), 1);
  run_kernel(mesh.world(), detail::row_reduction_work(local, 1), "row maxima", [&] {
    maxima = local.cols() == 0 ? row_values<Scalar>::Constant(local.rows(), 1, -std::numeric_limits<Scalar>::infinity())
                               : row_values<Scalar>(local.rowwise().maxCoeff());
  });
  combine_across_row<Layout>(mesh, maxima, op::max);
  return maxima;
}

}  // namespace shardwise
