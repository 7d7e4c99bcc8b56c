#pragma once
// Moving a vector between where it lives and where a matrix uses it (layout/vector_layout.hpp), both
// ways; the communication of every matrix-vector operation (A + b, A ∘ b, layer norm's gamma, beta):
//
//   broadcast_vector<L>(b)   b from vector_layout_t<L> to broadcast_vector_layout_t<L>, so that each rank
//                            holds the entries of the columns of its block of an L matrix.
//   column_sums(m)           the sums of an L matrix's columns, in vector_layout_t<L>: the adjoint of
//                            broadcasting, hence the gradient of any vector that was broadcast over rows.
//
// 1-D and 2-D: the vector already lives in the broadcast layout, so broadcasting is the vector itself
// (no copy), and the column sums are each rank's local sums all-reduced over the axes that cut the rows.
//
// 3-D (the paper's Algorithms 7 and 8): the vector lives on the diagonal j == l, piece b_ji on rank
// (i, j, l). For an input-direction matrix A_ijl (columns over z), broadcast in y from the diagonal rank
// (i, l, l) gives every (i, *, l) the piece b_li, then all-gather in x gives b_l, the vector entries of
// A_il's columns. For an output-direction matrix C_ilj (columns over y) the broadcast runs in z. The
// gradient goes back the same way reversed: local column sums, reduce-scatter in x, reduce in y (or z)
// onto the diagonal rank.
// The paper's path needs the cut of the vector into p_y·p_x pieces to nest in the cut of the columns
// into p_z pieces, which holds when N divides p_y·p_x (every padding rule then cuts evenly). Otherwise
// (padded or ragged shapes) the pieces straddle the columns' cut, and the vector moves with one
// redistribution (an all_to_all_v, tensor/distribute.hpp) instead: same result, no equal-block collective.
#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "shardwise/comm/reduction.hpp"
#include "shardwise/core/element.hpp"
#include "shardwise/core/error.hpp"
#include "shardwise/core/kernel.hpp"
#include "shardwise/core/shared_buffer.hpp"
#include "shardwise/layout/partial_sum.hpp"
#include "shardwise/layout/vector_layout.hpp"
#include "shardwise/tensor/distribute.hpp"
#include "shardwise/tensor/dtensor.hpp"
#include "shardwise/tensor/reduce.hpp"

namespace shardwise {

// The gradients of a matrix-vector operation (A + b, A ∘ b): of the matrix, and of the vector.
template <class T, class Layout, class Mesh>
struct matrix_vector_gradients {
  dtensor<T, Layout, Mesh> matrix;
  dtensor<T, vector_layout_t<Layout>, Mesh> vector;
};

namespace detail {

// Throws unless `vector` is 1 x N beside an M x N `matrix` on the same mesh.
template <class Matrix, class Vector>
void check_vector_fits(const Matrix& matrix, const Vector& vector, std::string_view operation) {
  const int rank = matrix.mesh().world().world_rank();
  if (&matrix.mesh() != &vector.mesh())
    throw argument_error(rank, operation, "the matrix and the vector live on different meshes");
  if (vector.rows() != 1 || vector.cols() != matrix.cols())
    throw argument_error(rank, operation,
                         "the vector is " + extents_string(vector.rows(), vector.cols()) + "; a " +
                             extents_string(matrix.rows(), matrix.cols()) + " matrix needs a 1x" +
                             std::to_string(matrix.cols()) + " vector");
}

// The work of one pass over a rank's block of `matrix` with its part of a 1 x N `vector`: one operation
// per element, the block and the vector read and a block's worth written (a kernel, core/kernel.hpp).
template <class Matrix, class Vector>
[[nodiscard]] work matrix_vector_work(const Matrix& matrix, const Vector& vector) {
  const auto elements = static_cast<double>(matrix.local().size());
  const double element = sizeof(typename Matrix::value_type);
  return {elements, element * (2 * elements + static_cast<double>(vector.local().size()))};
}

// The mesh axes of the paper's path for a cube layout L (rows over (across, other), columns over column).
template <class L>
struct diagonal_axes {
  static constexpr int across = static_cast<int>(L::row_axes[0]);
  static constexpr int other = static_cast<int>(L::row_axes[1]);
  static constexpr int column = static_cast<int>(L::col_axes[0]);

  // Whether the vector's pieces nest in the columns' cut (see the top of this file); the same on every
  // rank, so all take the same path.
  template <class Mesh>
  static bool nests(const Mesh& mesh, std::int64_t n) {
    return n % (std::int64_t{mesh.shape()[column]} * mesh.shape()[across]) == 0;
  }
  template <class Mesh>
  static std::size_t piece_size(const Mesh& mesh, std::int64_t n) {
    return static_cast<std::size_t>(n / (std::int64_t{mesh.shape()[column]} * mesh.shape()[across]));
  }
};

}  // namespace detail

// Returns a const reference to `vector` itself where its layout is already the broadcast one (1-D,
// 2-D), a new tensor otherwise: callers bind the result to `const auto&`, and keep `vector` alive.
// (A temporary `vector` takes the overload below.)
template <split_layout MatrixLayout, value_element T, class Mesh>
[[nodiscard]] decltype(auto) broadcast_vector(const dtensor<T, vector_layout_t<MatrixLayout>, Mesh>& vector) {
  using broadcast = broadcast_vector_layout_t<MatrixLayout>;
  if constexpr (std::is_same_v<broadcast, vector_layout_t<MatrixLayout>>) {
    return (vector);
  } else {
    using axes = detail::diagonal_axes<MatrixLayout>;
    Mesh& mesh = vector.mesh();
    if (!axes::nests(mesh, vector.cols())) return redistribute<broadcast>(vector);
    // Algorithm 7: broadcast b_li in y (from the diagonal rank), all-gather b_l in x.
    dtensor<T, broadcast, Mesh> spread(mesh, vector.extents());
    const auto piece = shared_buffer<T>::scratch(static_cast<std::size_t>(axes::piece_size(mesh, vector.cols())));
    run_copy<T>(mesh.world(), static_cast<std::int64_t>(piece.size()), "vector off the diagonal", [&] {
      const auto copied = std::ranges::copy(vector.data(), piece.data()).out;  // nothing off the diagonal
      std::fill(copied, piece.data() + piece.size(), T{});
    });
    mesh.axis(axes::other).broadcast(piece.span(), mesh.coords()[axes::column]);
    mesh.axis(axes::across).all_gather(piece.span(), spread.data());
    return spread;
  }
}

// A temporary is returned as a tensor, never as a reference to it, so `const auto&` cannot outlive it.
template <split_layout MatrixLayout, value_element T, class Mesh>
[[nodiscard]] dtensor<T, broadcast_vector_layout_t<MatrixLayout>, Mesh> broadcast_vector(
    dtensor<T, vector_layout_t<MatrixLayout>, Mesh>&& vector) {
  if constexpr (std::is_same_v<broadcast_vector_layout_t<MatrixLayout>, vector_layout_t<MatrixLayout>>)
    return std::move(vector);
  else
    return broadcast_vector<MatrixLayout>(std::as_const(vector));
}

template <value_element T, split_layout Layout, class Mesh>
[[nodiscard]] dtensor<T, vector_layout_t<Layout>, Mesh> column_sums(const dtensor<T, Layout, Mesh>& matrix) {
  using storage = vector_layout_t<Layout>;
  Mesh& mesh = matrix.mesh();
  dtensor<T, column_sums_layout_t<Layout>, Mesh> sums(mesh, {1, matrix.cols()});
  const auto elements = static_cast<double>(matrix.local().size());
  const work summing{elements, sizeof(T) * (elements + static_cast<double>(sums.local().size()))};
  run_kernel(mesh.world(), summing, "column sums", [&] {
    sums.local() = matrix.local().template cast<accumulator_t<T>>().colwise().sum().template cast<T>();
  });  // zero where this rank owns no rows
  if constexpr (!is_partial_sum_v<column_sums_layout_t<Layout>>) {
    return sums;  // the rows are not cut: every rank summed whole columns
  } else if constexpr (std::is_same_v<storage, broadcast_vector_layout_t<Layout>>) {
    return reduce(std::move(sums));
  } else {
    using axes = detail::diagonal_axes<Layout>;
    if (!axes::nests(mesh, matrix.cols())) return redistribute<storage>(reduce(std::move(sums)));
    // Algorithm 8: reduce-scatter in x, then reduce in y (or z) onto the diagonal rank.
    dtensor<T, storage, Mesh> gradient(mesh, sums.extents());
    const auto piece = shared_buffer<T>::scratch(static_cast<std::size_t>(axes::piece_size(mesh, matrix.cols())));
    mesh.axis(axes::across).reduce_scatter(sums.data(), piece.span(), op::sum);
    mesh.axis(axes::other).reduce(piece.span(), op::sum, mesh.coords()[axes::column]);
    if (gradient.block_count() == 1)
      run_copy<T>(mesh.world(), static_cast<std::int64_t>(piece.size()), "column sums onto the diagonal",
                  [&] { std::ranges::copy(piece.span(), gradient.data().begin()); });
    return gradient;
  }
}

}  // namespace shardwise
