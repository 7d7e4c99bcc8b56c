#pragma once
// Collective matmul for 1-D tensor parallelism with sequence parallelism (Megatron-LM; Wang et al.,
// "Overlap Communication with Dependent Computation via Decomposition"): the all-gather before a
// column-parallel product and the reduce-scatter after a row-parallel one, each decomposed into a ring
// over mesh axis 0 in which one piece travels (isend/irecv) while the GEMM of another runs.
//
//   auto y  = all_gather_matmul(x, w);      // x col_1d (rows cut), w row_1d -> y row_1d  = gather(x)·W
//   auto z  = matmul_reduce_scatter(h, v);  // h row_1d, v col_1d -> z col_1d  = the sum of h·v, rows cut
//
// Their gradients are the same two patterns, so the two functions take the forms of matmul
// (transposed(t) operands) and serve forward and backward:
//
//   forward                        dX (input's layout)                      dW (weight's layout)
//   y = all_gather_matmul(x, w)    matmul_reduce_scatter(dy, transposed(w))  all_gather_matmul(transposed(x), dy)
//   z = matmul_reduce_scatter(h,v) all_gather_matmul(dz, transposed(v))      all_gather_matmul(transposed(h), dz)
//
// all_gather_matmul(A, B): one operand has its rows cut over axis 0 and its columns whole (col_1d, any
// padding rule) — the left one when that works, else the right — and with that operand replicated the
// pair is a 1-D product (ops/matmul_1d.hpp) that sums nothing; the result is that product's. P steps:
// at step s this rank holds the gathered operand's piece (rank + s) mod P, sends it to rank - 1 and
// receives the next from rank + 1 while it multiplies the piece it holds into the rows of the result
// the piece makes, or, when the gathered rows are the inner dimension, adds the piece's share of the
// sum. Per rank it sends and receives the (P - 1) pieces an all-gather would, and never
// holds more than two pieces.
//
// matmul_reduce_scatter(A, B): the pair is a 1-D product whose inner dimension is cut over axis 0
// (its result a partial_sum); the sum is reduce-scattered over the result's rows into col_1d with the
// operands' padding rule. P steps: at step s this rank multiplies the rows of destination
// (rank - 1 - s) mod P, adds the running sum received from rank - 1 and sends it on to rank + 1; the
// GEMM of the next step runs while that sum travels, and the last step's sum is this rank's rows of the
// result. Per rank it sends and receives (P - 1) blocks of the result, as a reduce-scatter does. The
// sums are taken in ring order, not rank order, so float results differ from matmul's in the last bits.
//
// Any shape and padding rule (pieces of different sizes travel as they are, padding never does); on
// meshes of more dimensions the ring runs along axis 0, replicated over the others. The messages travel
// on mesh.private_axis(0), so none of the user's messages on axis 0 can match them, whatever its tag.
// Collective over the mesh: every rank calls with the same shapes; inner dimensions that differ throw
// argument_error.
//
// On simulated GPUs (sim_gpu) each GEMM, and each addition of a received sum, is a kernel on the compute
// stream, and the messages leave from the axis communicator's stream; when that is a stream of its own
// (use_stream before the mesh is built), a piece travels while another's GEMM runs in virtual time too,
// and a ring of GEMMs g and transfers t takes (P - 1) · max(g, t) + g, plus (P - 1) additions a for
// matmul_reduce_scatter (tests/ops/collective_matmul_time_test.cpp).
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "shardwise/core/kernel.hpp"
#include "shardwise/layout/partial_sum.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/ops/local_product.hpp"
#include "shardwise/ops/matmul.hpp"
#include "shardwise/ops/matmul_1d.hpp"
#include "shardwise/tensor/dtensor.hpp"

namespace shardwise {

namespace detail {

// The tag of the rings' messages on the mesh's private axis (each ring's messages between a pair of
// ranks arrive in order).
inline constexpr int ring_tag = 0;

// Rows cut over axis 0, columns whole: the layout a ring passes around.
template <class Layout>
constexpr bool rows_cut_over_axis_0() {
  if constexpr (split_layout<Layout>) {
    return classify_cut(Layout::row_axes) == cut_1d::over_axis_0 && classify_cut(Layout::col_axes) == cut_1d::whole;
  } else {
    return false;
  }
}

// Whether op(Left)·op(Right) is a 1-D product whose result is final (no sum pending).
template <class Left, class Right, bool TransposeLeft, bool TransposeRight>
constexpr bool final_1d_product() {
  using rule = megatron_product<Left, Right, TransposeLeft, TransposeRight>;
  if constexpr (rule::exists) {
    return !is_partial_sum_v<typename rule::result>;
  } else {
    return false;
  }
}

template <class Left, class Right, bool TransposeLeft, bool TransposeRight>
struct all_gather_product {
  static constexpr bool gathers_left = false;
  static constexpr bool exists = false;
};

template <split_layout Left, split_layout Right, bool TransposeLeft, bool TransposeRight>
struct all_gather_product<Left, Right, TransposeLeft, TransposeRight> {
  static constexpr bool gathers_left =
      rows_cut_over_axis_0<Left>() &&
      final_1d_product<replicated<typename Left::padding>, Right, TransposeLeft, TransposeRight>();
  // (A transposed right operand's rows are n, which only a left operand cutting m leaves whole; such a
  // left operand is col_1d and is gathered instead.)
  static constexpr bool gathers_right =
      !gathers_left && !TransposeRight && rows_cut_over_axis_0<Right>() &&
      final_1d_product<Left, replicated<typename Right::padding>, TransposeLeft, TransposeRight>();
  static constexpr bool exists = gathers_left || gathers_right;
  // The gathered rows are the product's inner dimension k (each piece adds its share of the sum), or
  // else its rows m (each piece makes rows of the result).
  static constexpr bool gathers_inner = !(gathers_left && !TransposeLeft);
  using result =
      typename megatron_product<std::conditional_t<gathers_left, replicated<typename Left::padding>, Left>,
                                std::conditional_t<gathers_right, replicated<typename Right::padding>, Right>,
                                TransposeLeft, TransposeRight>::result;
};

template <class Left, class Right, bool TransposeLeft, bool TransposeRight>
struct reduce_scatter_product {
  static constexpr bool exists = false;
};

template <split_layout Left, split_layout Right, bool TransposeLeft, bool TransposeRight>
requires megatron_product<Left, Right, TransposeLeft, TransposeRight>::exists
struct reduce_scatter_product<Left, Right, TransposeLeft, TransposeRight> {
  static constexpr bool exists =
      is_partial_sum_v<typename megatron_product<Left, Right, TransposeLeft, TransposeRight>::result>;
  using result = col_1d<typename Left::padding>;
};

template <class>
inline constexpr bool no_collective_rule = false;

// The pieces a ring of `parts` ranks passes around: `extent` rows cut by Padding into one piece per
// rank, counted from this rank, `me` (piece s is the piece of rank (me + s) mod parts); and the ranks
// before and after it.
template <class Padding>
struct ring_of_pieces {
  std::int64_t extent;
  std::int64_t parts;
  std::int64_t me;

  [[nodiscard]] piece operator()(std::int64_t step) const { return Padding::cut(extent, parts, (me + step) % parts); }
  [[nodiscard]] std::int64_t largest() const {
    std::int64_t rows = 0;
    for (std::int64_t part = 0; part < parts; ++part) rows = std::max(rows, Padding::cut(extent, parts, part).extent);
    return rows;
  }
  [[nodiscard]] int before() const { return static_cast<int>((me + parts - 1) % parts); }
  [[nodiscard]] int after() const { return static_cast<int>((me + 1) % parts); }
};

template <bool TransposeLeft, bool TransposeRight, class T, class LeftLayout, class RightLayout, class Mesh>
[[nodiscard]] auto ring_all_gather_matmul(const dtensor<T, LeftLayout, Mesh>& left,
                                          const dtensor<T, RightLayout, Mesh>& right) {
  using rule = all_gather_product<LeftLayout, RightLayout, TransposeLeft, TransposeRight>;
  using gathered_layout = std::conditional_t<rule::gathers_left, LeftLayout, RightLayout>;
  using padding = typename gathered_layout::padding;
  dtensor<T, typename rule::result, Mesh> result(
      left.mesh(), product_extents<TransposeLeft, TransposeRight>(left, right, "all_gather_matmul"));
  const auto& gathered = [&]() -> const dtensor<T, gathered_layout, Mesh>& {
    if constexpr (rule::gathers_left) {
      return left;
    } else {
      return right;
    }
  }();
  auto& ring = left.mesh().private_axis(0);
  const ring_of_pieces<padding> piece_of{gathered.rows(), ring.size(), ring.rank()};
  const std::int64_t parts = piece_of.parts;
  const std::int64_t width = gathered.cols();  // whole on every rank
  const std::int64_t largest = piece_of.largest();
  // Two pieces in flight: the one being multiplied (and sent on) and the next (being received).
  const std::span<T> held = workspace<T>(buffer::left, static_cast<std::size_t>(2 * largest * width));
  const auto slot = [&](std::int64_t step, std::int64_t rows) {
    return held.subspan(static_cast<std::size_t>((step % 2) * largest * width), static_cast<std::size_t>(rows * width));
  };
  const auto left_local = left.local();
  const auto right_local = right.local();
  auto result_local = result.local();

  for (std::int64_t step = 0; step < parts; ++step) {
    const piece current = piece_of(step);
    const std::span<const T> data = step == 0 ? gathered.data().first(static_cast<std::size_t>(current.extent * width))
                                              : std::span<const T>(slot(step, current.extent));
    typename std::remove_reference_t<decltype(ring)>::request arrival, departure;
    if (step + 1 < parts) {
      arrival = ring.irecv(slot(step + 1, piece_of(step + 1).extent), piece_of.after(), ring_tag);
      departure = ring.isend(data, piece_of.before(), ring_tag);
    }
    const strided_map<const T> rows(data.data(), current.extent, width, Eigen::OuterStride<>(width));
    if constexpr (!rule::gathers_inner) {
      multiply<false, TransposeRight>(ring, result_local.middleRows(current.offset, current.extent), rows, right_local,
                                      false);
    } else if constexpr (rule::gathers_left) {
      multiply<true, TransposeRight>(ring, result_local, rows,
                                     rows_of<TransposeRight>(right_local, current.offset, current.extent), step > 0);
    } else {
      multiply<TransposeLeft, false>(
          ring, result_local, rows_of<!TransposeLeft>(left_local, current.offset, current.extent), rows, step > 0);
    }
    arrival.wait();
    departure.wait();
  }
  return result;
}

template <bool TransposeLeft, bool TransposeRight, class T, class LeftLayout, class RightLayout, class Mesh>
[[nodiscard]] auto ring_matmul_reduce_scatter(const dtensor<T, LeftLayout, Mesh>& left,
                                              const dtensor<T, RightLayout, Mesh>& right) {
  using result_layout = typename reduce_scatter_product<LeftLayout, RightLayout, TransposeLeft, TransposeRight>::result;
  using padding = typename result_layout::padding;
  const matrix_extents shape = product_extents<TransposeLeft, TransposeRight>(left, right, "matmul_reduce_scatter");
  dtensor<T, result_layout, Mesh> result(left.mesh(), shape);
  auto& ring = left.mesh().private_axis(0);
  const ring_of_pieces<padding> piece_of{shape.rows, ring.size(), ring.rank()};
  const std::int64_t parts = piece_of.parts;
  const std::int64_t width = shape.cols;
  const std::int64_t largest = piece_of.largest();
  // Two sums of this rank's (one may still be travelling while the next is computed) and one arriving.
  const std::span<T> sums = workspace<T>(buffer::product, static_cast<std::size_t>(3 * largest * width));
  const auto slot = [&](std::int64_t which, std::int64_t rows) {
    return sums.subspan(static_cast<std::size_t>(which * largest * width), static_cast<std::size_t>(rows * width));
  };
  const auto left_local = left.local();
  const auto right_local = right.local();
  using request = typename std::remove_reference_t<decltype(ring)>::request;
  request arrival;
  std::array<request, 2> departures;

  for (std::int64_t step = 0; step < parts; ++step) {
    const piece destination = piece_of(2 * parts - 1 - step);
    const bool last = step + 1 == parts;
    // The sum for `destination`: into the result on the last step, else into slot step % 2, whose
    // previous sum must have left first.
    request& departure = departures[static_cast<std::size_t>(step % 2)];
    departure.wait();
    const std::span<T> own = slot(step % 2, destination.extent);
    auto sum = last ? result.local()
                    : typename dtensor<T, result_layout, Mesh>::block_map(own.data(), destination.extent, width,
                                                                          Eigen::OuterStride<>(width));
    multiply<TransposeLeft, TransposeRight>(
        ring, sum, rows_of<TransposeLeft>(left_local, destination.offset, destination.extent), right_local, false);
    if (step > 0) {
      arrival.wait();
      // One addition per element: this rank's addend and the received sum read, the sum written.
      const auto elements = static_cast<double>(destination.extent * width);
      run_kernel(ring, {elements, 3 * sizeof(T) * elements}, "add received sum", [&] {
        sum += strided_map<const T>(slot(2, destination.extent).data(), destination.extent, width,
                                    Eigen::OuterStride<>(width));
      });
    }
    if (last) break;
    const piece next = piece_of(2 * parts - 2 - step);
    arrival = ring.irecv(slot(2, next.extent), piece_of.before(), ring_tag);
    departure = ring.isend(std::span<const T>(own), piece_of.after(), ring_tag);
  }
  for (request& departure : departures) departure.wait();
  return result;
}

}  // namespace detail

// gather(op(A)) · op(B) or op(A) · gather(op(B)) with the all-gather over axis 0 decomposed into a ring
// that overlaps the GEMMs (see the top of this file). The same result, layout and values, as matmul of
// the gathered operand.
template <matmul_operand Left, matmul_operand Right>
[[nodiscard]] auto all_gather_matmul(const Left& left_operand, const Right& right_operand) try {
  using pair = detail::product_pair<Left, Right>;
  using L = typename pair::left_layout;
  using R = typename pair::right_layout;
  constexpr bool tl = pair::transpose_left;
  constexpr bool tr = pair::transpose_right;
  if constexpr (detail::all_gather_product<L, R, tl, tr>::exists) {
    return detail::ring_all_gather_matmul<tl, tr>(detail::product_operand<Left>::tensor(left_operand),
                                                  detail::product_operand<Right>::tensor(right_operand));
  } else {
    static_assert(detail::no_collective_rule<L>,
                  "shardwise::all_gather_matmul: neither operand has its rows cut over axis 0 (col_1d) such that, "
                  "gathered, the pair is a 1-D product that sums nothing (L and R in the instantiation above; see "
                  "docs/tensor-parallel.md, Collective matmul)");
  }
} catch (...) {
  detail::rethrow_within_product("all_gather_matmul", left_operand, right_operand);
}

// op(A) · op(B), whose inner dimension both cut over axis 0, with the sum reduce-scattered over the
// result's rows (col_1d) in a ring that overlaps the GEMMs (see the top of this file). The same values
// as redistribute<col_1d<Padding>>(matmul(a, b)) with the operands' rule, up to the order of the sum.
template <matmul_operand Left, matmul_operand Right>
[[nodiscard]] auto matmul_reduce_scatter(const Left& left_operand, const Right& right_operand) try {
  using pair = detail::product_pair<Left, Right>;
  using L = typename pair::left_layout;
  using R = typename pair::right_layout;
  constexpr bool tl = pair::transpose_left;
  constexpr bool tr = pair::transpose_right;
  if constexpr (detail::reduce_scatter_product<L, R, tl, tr>::exists) {
    return detail::ring_matmul_reduce_scatter<tl, tr>(detail::product_operand<Left>::tensor(left_operand),
                                                      detail::product_operand<Right>::tensor(right_operand));
  } else {
    static_assert(detail::no_collective_rule<L>,
                  "shardwise::matmul_reduce_scatter: the pair is not a 1-D product whose inner dimension both "
                  "operands cut over axis 0 (L and R in the instantiation above; see docs/tensor-parallel.md, "
                  "Collective matmul)");
  }
} catch (...) {
  detail::rethrow_within_product("matmul_reduce_scatter", left_operand, right_operand);
}

}  // namespace shardwise
