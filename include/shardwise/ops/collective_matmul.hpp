#pragma once
// Collective matmul for 1-D tensor parallelism with sequence parallelism (Megatron-LM; Wang et al.,
// "Overlap Communication with Dependent Computation via Decomposition"): the all-gather before a
// column-parallel product and the reduce-scatter after a row-parallel one, each decomposed into a ring
// over mesh axis 0 in which pieces travel (isend/irecv) while the GEMMs of others run. The ring runs
// both ways at once, as Wang et al.'s bidirectional form: of the P - 1 other ranks' pieces, P / 2 come
// round one way and (P - 1) / 2 the other, so both directions of every link carry data and the ring
// takes P / 2 + 1 steps instead of P.
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
// The last row's two gradients gather the same dz: all_gather_matmul_both_sides(transposed(h), dz,
// transposed(v)) gathers it once, in one ring, for both. Linears that read one x (Q, K and V) gather it
// once for all their products, all_gather_matmul(x, std::tie(wq, wk, wv)), and reduce-scatter the sum of
// their input gradients once, matmul_reduce_scatter(std::tie(dq, dk, dv), std::tuple{transposed(wq), ...}).
//
// Each takes a last argument, collective_matmul_form::ring (the default) or ::unfused: the whole
// all-gather (redistribute to replicated) and then one matmul, or one matmul and then the whole
// reduce-scatter; the same result, layout and values (up to the order of float sums). The ring pays
// where a piece's GEMM hides a piece's transfer; a layer can leave the choice to its first calls
// (matmul_options::collective = automatic: ops/collective_matmul_choice.hpp).
//
// all_gather_matmul(A, B): one operand has its rows cut over axis 0 and its columns whole (col_1d, any
// padding rule) — the left one when that works, else the right — and with that operand replicated the
// pair is a 1-D product (ops/matmul_1d.hpp) that sums nothing; the result is that product's. At step s
// (0 to P / 2) this rank holds the gathered operand's pieces of ranks rank + s (passed down the ring
// from rank + 1) and rank - s (passed up from rank - 1, from step 1 to (P - 1) / 2), sends each on to
// the neighbour that needs it next and receives the next ones while it multiplies the pieces it holds
// into the rows of the result they make, or, when the gathered rows are the inner dimension, adds their
// shares of the sum. Per rank it sends and receives the (P - 1) pieces an all-gather would, and never
// holds more than four pieces (two each way).
//
// matmul_reduce_scatter(A, B): the pair is a 1-D product whose inner dimension is cut over axis 0
// (its result a partial_sum); the sum is reduce-scattered over the result's rows into col_1d with the
// operands' padding rule. The sum for rank d gathers the shares of the P / 2 ranks after it, passed
// from d + P / 2 down to d + 1, and of the (P - 1) / 2 ranks before it, passed from d - (P - 1) / 2 up
// to d - 1: at each step a rank multiplies its share for the sum passing through it each way, adds
// the running sum it received and sends it on; the GEMMs of the next step run while the sums travel,
// and on the last step this rank adds its own share to the two sums arriving. Per rank it sends and
// receives (P - 1) blocks of the result, as a reduce-scatter does, and holds six blocks at most (three
// each way). The sums are taken in ring order, not rank order, so float results differ from matmul's in
// the last bits.
//
// Any shape and padding rule (pieces of different sizes travel as they are, padding never does); on
// meshes of more dimensions the ring runs along axis 0, replicated over the others. The messages travel
// on mesh.private_axis(0), so none of the user's messages on axis 0 can match them, whatever its tag.
// Collective over the mesh: every rank calls with the same shapes; inner dimensions that differ throw
// argument_error.
//
// On simulated GPUs (sim_gpu) each GEMM, and each addition of a received sum, is a kernel on the compute
// stream, and the messages leave from the axis communicator's stream; when that is a stream of its own
// (use_stream before the mesh is built), pieces travel while other pieces' GEMMs run in virtual time
// too. The two ways take different links at once, so a step with GEMMs g each and transfers t of one
// piece takes max(GEMMs, t), and the last step its GEMMs alone; matmul_reduce_scatter adds, on every
// step but the first, the additions a of the sums received (tests/ops/collective_matmul_time_test.cpp).
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "shardwise/core/error.hpp"
#include "shardwise/core/kernel.hpp"
#include "shardwise/layout/layout.hpp"
#include "shardwise/layout/partial_sum.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/ops/local_product.hpp"
#include "shardwise/ops/matmul.hpp"
#include "shardwise/ops/matmul_1d.hpp"
#include "shardwise/tensor/accumulate.hpp"
#include "shardwise/tensor/distribute.hpp"
#include "shardwise/tensor/dtensor.hpp"

namespace shardwise {

namespace detail {

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

// The ranks of a ring of `parts` (axis 0) seen from this one, `me`, and the two ways round it: what a
// rank receives comes from the rank after it (direction +1), carrying the pieces of (or the shares
// from) the `ahead` = P / 2 ranks after it, or from the rank before it (-1), carrying those of the
// `behind` = (P - 1) / 2 ranks before it; each is sent on the other way. Each way carries half the
// data, so both directions of every link work and the ring takes about half the steps of a ring one
// way round.
struct two_way_ring {
  std::int64_t parts;
  std::int64_t me;

  [[nodiscard]] std::int64_t ahead() const { return parts / 2; }
  [[nodiscard]] std::int64_t behind() const { return (parts - 1) / 2; }
  [[nodiscard]] std::int64_t length(int direction) const { return direction > 0 ? ahead() : behind(); }
  // The rank `offset` places on (negative: before this one).
  [[nodiscard]] std::int64_t rank_at(std::int64_t offset) const { return ((me + offset) % parts + parts) % parts; }
  [[nodiscard]] int neighbour(int direction) const { return static_cast<int>(rank_at(direction)); }
};

// The rows of `extent` that Padding gives each rank of the ring, and the most any rank has.
template <class Padding>
struct pieces_of {
  std::int64_t extent;
  two_way_ring ring;

  [[nodiscard]] piece at(std::int64_t offset) const { return Padding::cut(extent, ring.parts, ring.rank_at(offset)); }
  [[nodiscard]] std::int64_t largest() const {
    std::int64_t rows = 0;
    for (std::int64_t part = 0; part < ring.parts; ++part)
      rows = std::max(rows, Padding::cut(extent, ring.parts, part).extent);
    return rows;
  }
};

// Way w of the two goes in directions[w]; its messages carry tag w, and its buffers are its own.
inline constexpr std::array<int, 2> directions{+1, -1};

// One product op(left) · op(right) whose operand with rows cut over axis 0 a ring passes round in
// pieces: each piece multiplies into the rows of the result it makes or, when the gathered rows are the
// product's inner dimension, adds its share of the sum.
template <bool TransposeLeft, bool TransposeRight, class T, class LeftLayout, class RightLayout, class Mesh>
class gathered_product {
  using rule = all_gather_product<LeftLayout, RightLayout, TransposeLeft, TransposeRight>;

 public:
  using gathered_layout = std::conditional_t<rule::gathers_left, LeftLayout, RightLayout>;
  using result_type = dtensor<T, typename rule::result, Mesh>;

  gathered_product(const dtensor<T, LeftLayout, Mesh>& left, const dtensor<T, RightLayout, Mesh>& right,
                   std::string_view call)
      : left_(left),
        right_(right),
        result_(left.mesh(), product_extents<TransposeLeft, TransposeRight>(left, right, call)) {}

  [[nodiscard]] const dtensor<T, gathered_layout, Mesh>& gathered() const {
    if constexpr (rule::gathers_left) {
      return left_;
    } else {
      return right_;
    }
  }

  template <class Axis>
  void multiply_piece(Axis& axis, const piece current, const std::span<const T> data) {
    const std::int64_t width = gathered().cols();
    const strided_map<const T> rows(data.data(), current.extent, width, Eigen::OuterStride<>(width));
    auto result_local = result_.local();
    if constexpr (!rule::gathers_inner) {
      multiply<false, TransposeRight>(axis, result_local.middleRows(current.offset, current.extent), rows,
                                      right_.local(), false);
    } else if constexpr (rule::gathers_left) {
      multiply<true, TransposeRight>(axis, result_local, rows,
                                     rows_of<TransposeRight>(right_.local(), current.offset, current.extent),
                                     !first_product_);
    } else {
      multiply<TransposeLeft, false>(axis, result_local,
                                     rows_of<!TransposeLeft>(left_.local(), current.offset, current.extent), rows,
                                     !first_product_);
    }
    first_product_ = false;
  }

  [[nodiscard]] result_type take_result() { return std::move(result_); }

 private:
  const dtensor<T, LeftLayout, Mesh>& left_;
  const dtensor<T, RightLayout, Mesh>& right_;
  result_type result_;
  bool first_product_ = true;
};

// Passes `gathered`'s pieces round the two-way ring over axis 0 and gives each piece, this rank's own
// first, to every one of `products`, which multiply it while the next pieces travel. At step s this
// rank holds the pieces of ranks r + s (arrived from r + 1) and r - s (from r - 1, from step 1 on) and
// passes each on to the neighbour that needs it next.
template <class T, class Layout, class Mesh, class... Products>
void ring_all_gather(const dtensor<T, Layout, Mesh>& gathered, Products&... products) {
  auto& axis = gathered.mesh().private_axis(0);
  const two_way_ring ring{axis.size(), axis.rank()};
  const pieces_of<typename Layout::padding> pieces{gathered.rows(), ring};
  const std::int64_t width = gathered.cols();  // whole on every rank
  const std::int64_t largest = pieces.largest();
  // Each way, two pieces in flight: the one being multiplied (and sent on) and the next (arriving).
  const std::span<T> held = workspace<T>(buffer::left, static_cast<std::size_t>(4 * largest * width));
  const auto slot = [&](std::size_t way, std::int64_t step, std::int64_t rows) {
    const auto index = static_cast<std::int64_t>(2 * way) + step % 2;
    return held.subspan(static_cast<std::size_t>(index * largest * width), static_cast<std::size_t>(rows * width));
  };
  const std::span<const T> own = gathered.data().first(static_cast<std::size_t>(pieces.at(0).extent * width));

  using request = typename std::remove_reference_t<decltype(axis)>::request;
  for (std::int64_t step = 0; step <= ring.ahead(); ++step) {
    std::array<request, 4> transfers;
    std::array<std::span<const T>, 2> data;
    std::array<bool, 2> multiplies{};
    for (std::size_t way = 0; way < 2; ++way) {
      const int direction = directions[way];
      const std::int64_t pieces_this_way = ring.length(direction);
      if (step > pieces_this_way) continue;
      multiplies[way] = step > 0 || direction > 0;  // this rank's own piece once
      data[way] = step == 0 ? own : std::span<const T>(slot(way, step, pieces.at(direction * step).extent));
      if (step < pieces_this_way) {
        const auto tag = static_cast<int>(way);
        transfers[2 * way] =
            axis.irecv(slot(way, step + 1, pieces.at(direction * (step + 1)).extent), ring.neighbour(direction), tag);
        transfers[2 * way + 1] = axis.isend(data[way], ring.neighbour(-direction), tag);
      }
    }
    for (std::size_t way = 0; way < 2; ++way)
      if (multiplies[way]) (products.multiply_piece(axis, pieces.at(directions[way] * step), data[way]), ...);
    for (request& transfer : transfers) transfer.wait();
  }
}

// The gathered_product of a pair of operands as matmul takes them (a dtensor, or transposed(dtensor)).
template <class Left, class Right>
[[nodiscard]] auto gathered_operands(const Left& left, const Right& right, std::string_view call) {
  using pair = product_pair<Left, Right>;
  return gathered_product<pair::transpose_left, pair::transpose_right, typename pair::value_type,
                          typename pair::left_layout, typename pair::right_layout, typename pair::mesh_type>(
      product_operand<Left>::tensor(left), product_operand<Right>::tensor(right), call);
}

// This rank's share of op(left) · op(right), whose inner dimension both cut over axis 0, for some rows
// of the result at a time: what matmul_reduce_scatter's ring adds up.
template <bool TransposeLeft, bool TransposeRight, class T, class LeftLayout, class RightLayout, class Mesh>
struct scattered_product {
  static constexpr bool transpose_left = TransposeLeft, transpose_right = TransposeRight;
  using result_layout = typename reduce_scatter_product<LeftLayout, RightLayout, TransposeLeft, TransposeRight>::result;

  const dtensor<T, LeftLayout, Mesh>& left;
  const dtensor<T, RightLayout, Mesh>& right;

  [[nodiscard]] matrix_extents extents() const {
    return product_extents<TransposeLeft, TransposeRight>(left, right, "matmul_reduce_scatter");
  }
  // sum = (or += when `accumulate`) this rank's share of rows `rows` of the result.
  template <class Axis, class Sum>
  void multiply_share(Axis& axis, Sum&& sum, const piece rows, bool accumulate) const {
    multiply<TransposeLeft, TransposeRight>(axis, std::forward<Sum>(sum),
                                            rows_of<TransposeLeft>(left.local(), rows.offset, rows.extent),
                                            right.local(), accumulate);
  }
};

// The scattered_product of a pair of operands as matmul takes them.
template <class Left, class Right>
[[nodiscard]] auto scattered_operands(const Left& left, const Right& right) {
  using pair = product_pair<Left, Right>;
  return scattered_product<pair::transpose_left, pair::transpose_right, typename pair::value_type,
                           typename pair::left_layout, typename pair::right_layout, typename pair::mesh_type>{
      product_operand<Left>::tensor(left), product_operand<Right>::tensor(right)};
}

// Reduce-scatters over axis 0, in the two-way ring, the sum of `products` (scattered_product, one result
// shape and layout) into the result's rows, each step's GEMMs running while the sums travel.
template <class T, class ResultLayout, class Mesh, class... Products>
[[nodiscard]] dtensor<T, ResultLayout, Mesh> ring_reduce_scatter(Mesh& mesh, const matrix_extents shape,
                                                                 const Products&... products) {
  using padding = typename ResultLayout::padding;
  using block_map = typename dtensor<T, ResultLayout, Mesh>::block_map;
  dtensor<T, ResultLayout, Mesh> result(mesh, shape);
  auto& axis = mesh.private_axis(0);
  const two_way_ring ring{axis.size(), axis.rank()};
  const pieces_of<padding> pieces{shape.rows, ring};
  const std::int64_t width = shape.cols;
  const std::int64_t largest = pieces.largest();
  // Each way, two sums of this rank's (one may still be travelling while the next is computed) and one
  // arriving.
  const std::span<T> sums = workspace<T>(buffer::product, static_cast<std::size_t>(6 * largest * width));
  const auto slot = [&](std::size_t way, std::int64_t which, std::int64_t rows) {
    const auto index = static_cast<std::int64_t>(3 * way) + which;
    return sums.subspan(static_cast<std::size_t>(index * largest * width), static_cast<std::size_t>(rows * width));
  };
  // This rank's shares of the products' rows `rows`, summed into `sum`.
  const auto shares = [&](auto&& sum, const piece rows) {
    bool accumulate = false;
    ((products.multiply_share(axis, sum, rows, accumulate), accumulate = true), ...);
  };
  const auto add_received = [&](auto& sum, const std::size_t way, const std::int64_t rows) {
    // One addition per element: this rank's addend and the received sum read, the sum written.
    const auto elements = static_cast<double>(rows * width);
    run_kernel(axis, {elements, 3 * sizeof(T) * elements}, "add received sum", [&] {
      sum += strided_map<const T>(slot(way, 2, rows).data(), rows, width, Eigen::OuterStride<>(width));
    });
  };
  using request = typename std::remove_reference_t<decltype(axis)>::request;
  std::array<request, 2> arrivals;
  std::array<std::array<request, 2>, 2> departures;

  // The sum for rank d gathers the shares of the `ahead` ranks after it, passed from d + ahead down to
  // d + 1, and of the `behind` ranks before it, passed from d - behind up to d - 1. The second way, a
  // step shorter when P is even, starts a step later, so both arrive at d on the last step, where d
  // adds its own share to them. A way's k-th step (from 0) computes the share of rank
  // r - direction · (length - k).
  const std::int64_t steps = ring.ahead();
  for (std::int64_t step = 0; step < steps; ++step) {
    std::array<piece, 2> destination{};
    std::array<std::int64_t, 2> way_step{-1, -1};
    // This rank's share (and then its running sum) for the way's destination on this step.
    const auto own = [&](std::size_t way) { return slot(way, way_step[way] % 2, destination[way].extent); };
    const auto own_sum = [&](std::size_t way) {
      return block_map(own(way).data(), destination[way].extent, width, Eigen::OuterStride<>(width));
    };
    for (std::size_t way = 0; way < 2; ++way) {
      const int direction = directions[way];
      const std::int64_t length = ring.length(direction);
      const std::int64_t k = step - (steps - length);
      if (k < 0) continue;
      way_step[way] = k;
      destination[way] = pieces.at(-direction * (length - k));
      // Slot k % 2's previous sum must have left first.
      departures[way][static_cast<std::size_t>(k % 2)].wait();
      shares(own_sum(way), destination[way]);
    }
    for (std::size_t way = 0; way < 2; ++way) {
      if (way_step[way] <= 0) continue;
      arrivals[way].wait();
      auto sum = own_sum(way);
      add_received(sum, way, destination[way].extent);
    }
    for (std::size_t way = 0; way < 2; ++way) {
      if (way_step[way] < 0) continue;
      const int direction = directions[way];
      const piece next = pieces.at(-direction * (ring.length(direction) - way_step[way] - 1));
      const auto tag = static_cast<int>(way);
      arrivals[way] = axis.irecv(slot(way, 2, next.extent), ring.neighbour(direction), tag);
      departures[way][static_cast<std::size_t>(way_step[way] % 2)] =
          axis.isend(std::span<const T>(own(way)), ring.neighbour(-direction), tag);
    }
  }
  // The last step: this rank's own share, and the sums arriving both ways.
  const piece mine = pieces.at(0);
  auto sum = result.local();
  shares(sum, mine);
  for (std::size_t way = 0; way < 2; ++way) {
    if (ring.length(directions[way]) == 0) continue;
    arrivals[way].wait();
    add_received(sum, way, mine.extent);
  }
  for (auto& way : departures)
    for (request& departure : way) departure.wait();
  return result;
}

// The unfused forms: the whole collective, then the GEMM (or the GEMM, then the collective), what the
// rings overlap run one after the other.
template <bool Transposed, class Tensor>
decltype(auto) maybe_transposed(const Tensor& tensor) {
  if constexpr (Transposed) {
    return transposed(tensor);
  } else {
    return (tensor);
  }
}

template <class T, class Layout, class Mesh>
[[nodiscard]] auto all_gathered(const dtensor<T, Layout, Mesh>& pieces) {
  return redistribute<replicated<typename Layout::padding>>(pieces);
}

template <bool TransposeLeft, bool TransposeRight, class T, class LeftLayout, class RightLayout, class Mesh>
[[nodiscard]] auto unfused_all_gather_matmul(const dtensor<T, LeftLayout, Mesh>& left,
                                             const dtensor<T, RightLayout, Mesh>& right) {
  if constexpr (all_gather_product<LeftLayout, RightLayout, TransposeLeft, TransposeRight>::gathers_left) {
    const auto whole = all_gathered(left);
    return matmul(maybe_transposed<TransposeLeft>(whole), maybe_transposed<TransposeRight>(right));
  } else {
    const auto whole = all_gathered(right);
    return matmul(maybe_transposed<TransposeLeft>(left), maybe_transposed<TransposeRight>(whole));
  }
}

// The sum of `products` (scattered_product) computed whole, each product added while the sum is
// pending, then reduce-scattered.
template <class ResultLayout, class First, class... Others>
[[nodiscard]] auto unfused_reduce_scatter(const First& first, const Others&... others) {
  const auto whole = [](const auto& product) {
    using P = std::remove_cvref_t<decltype(product)>;
    return matmul(maybe_transposed<P::transpose_left>(product.left),
                  maybe_transposed<P::transpose_right>(product.right));
  };
  auto sum = whole(first);
  (accumulate(sum, whole(others)), ...);
  return redistribute<ResultLayout>(std::move(sum));
}

// Rule (all_gather_product, reduce_scatter_product) for a pair of operands as matmul takes them.
template <template <class, class, bool, bool> class Rule, class Left, class Right>
using rule_for_operands =
    Rule<typename product_pair<Left, Right>::left_layout, typename product_pair<Left, Right>::right_layout,
         product_pair<Left, Right>::transpose_left, product_pair<Left, Right>::transpose_right>;

// Whether op(Left) gathered times op(Right) is a collective product with Left the operand gathered, and
// whether op(Left) · op(Right) sums over a cut inner dimension that matmul_reduce_scatter scatters.
template <class Left, class Right>
concept gathers_left_operand =
    matmul_operand<Left> && matmul_operand<Right> && rule_for_operands<all_gather_product, Left, Right>::gathers_left;
template <class Left, class Right>
concept scatters_sum =
    matmul_operand<Left> && matmul_operand<Right> && rule_for_operands<reduce_scatter_product, Left, Right>::exists;

// The scattered_product of each pair of operands, the i-th left with the i-th right.
template <class... Lefts, class... Rights, std::size_t... I>
[[nodiscard]] auto scattered_pairs(const std::tuple<Lefts...>& lefts, const std::tuple<Rights...>& rights,
                                   std::index_sequence<I...>) {
  return std::tuple{scattered_operands(std::get<I>(lefts), std::get<I>(rights))...};
}

// "a, b; c, d": the operands of the products a call takes, for its errors.
template <class... Lefts, class... Rights, std::size_t... I>
[[nodiscard]] std::string describe_pairs(const std::tuple<Lefts...>& lefts, const std::tuple<Rights...>& rights,
                                         std::index_sequence<I...>) {
  std::string text;
  ((text += (I == 0 ? "" : "; ") + product_operand<std::remove_cvref_t<Lefts>>::describe(std::get<I>(lefts)) + ", " +
            product_operand<std::remove_cvref_t<Rights>>::describe(std::get<I>(rights))),
   ...);
  return text;
}

// A call runs one form: automatic is a choice over a layer's calls.
inline bool unfused(collective_matmul_form form, int rank, std::string_view call) {
  if (form == collective_matmul_form::automatic)
    throw argument_error(rank, call,
                         "collective_matmul_form::automatic chooses over many calls (matmul_options::collective of "
                         "nn::linear, or collective_matmul_choice); one call takes ring or unfused");
  return form == collective_matmul_form::unfused;
}

}  // namespace detail

// gather(op(A)) · op(B) or op(A) · gather(op(B)) with the all-gather over axis 0 decomposed into a ring
// that overlaps the GEMMs (see the top of this file). The same result, layout and values, as matmul of
// the gathered operand.
template <matmul_operand Left, matmul_operand Right>
[[nodiscard]] auto all_gather_matmul(const Left& left_operand, const Right& right_operand,
                                     collective_matmul_form form = collective_matmul_form::ring) try {
  using pair = detail::product_pair<Left, Right>;
  using L = typename pair::left_layout;
  using R = typename pair::right_layout;
  constexpr bool tl = pair::transpose_left;
  constexpr bool tr = pair::transpose_right;
  if constexpr (detail::all_gather_product<L, R, tl, tr>::exists) {
    const auto& left = detail::product_operand<Left>::tensor(left_operand);
    const auto& right = detail::product_operand<Right>::tensor(right_operand);
    if (detail::unfused(form, world_rank_of(left), "all_gather_matmul"))
      return detail::unfused_all_gather_matmul<tl, tr>(left, right);
    auto product = detail::gathered_operands(left_operand, right_operand, "all_gather_matmul");
    detail::ring_all_gather(product.gathered(), product);
    return product.take_result();
  } else {
    static_assert(detail::no_collective_rule<L>,
                  "shardwise::all_gather_matmul: neither operand has its rows cut over axis 0 (col_1d) such that, "
                  "gathered, the pair is a 1-D product that sums nothing (L and R in the instantiation above; see "
                  "docs/tensor-parallel.md, Collective matmul)");
    return detail::stand_in_for_refused_product(detail::product_operand<Left>::tensor(left_operand));
  }
} catch (...) {
  detail::rethrow_within_product("all_gather_matmul", left_operand, right_operand);
}

// a · gather(g) and gather(g) · b, with g (rows cut over axis 0, col_1d) gathered once, in one ring,
// for both products: what a row-parallel linear whose output is reduce-scattered needs in its backward,
//   auto [dv, dh] = all_gather_matmul_both_sides(transposed(h), dz, transposed(v));  // hᵀ·gather(dz), gather(dz)·Vᵀ
// where two all_gather_matmul calls would gather dz twice. Each result equals all_gather_matmul's, bit
// for bit.
template <matmul_operand Left, class T, class Layout, class Mesh, matmul_operand Right>
[[nodiscard]] auto all_gather_matmul_both_sides(const Left& a, const dtensor<T, Layout, Mesh>& g, const Right& b,
                                                collective_matmul_form form = collective_matmul_form::ring) try {
  using gathered_tensor = dtensor<T, Layout, Mesh>;
  using on_the_left = detail::product_pair<Left, gathered_tensor>;
  using on_the_right = detail::product_pair<gathered_tensor, Right>;
  constexpr bool tl = on_the_left::transpose_left;
  constexpr bool tr = on_the_right::transpose_right;
  using A = typename on_the_left::left_layout;
  using B = typename on_the_right::right_layout;
  if constexpr (detail::all_gather_product<A, Layout, tl, false>::gathers_right &&
                detail::all_gather_product<Layout, B, false, tr>::gathers_left) {
    constexpr std::string_view name = "all_gather_matmul_both_sides";
    if (detail::unfused(form, world_rank_of(g), name)) {
      const auto whole = detail::all_gathered(g);
      return std::pair{matmul(a, whole), matmul(whole, b)};
    }
    auto times_gathered = detail::gathered_operands(a, g, name);
    auto gathered_times = detail::gathered_operands(g, b, name);
    detail::ring_all_gather(g, times_gathered, gathered_times);
    return std::pair{times_gathered.take_result(), gathered_times.take_result()};
  } else {
    static_assert(detail::no_collective_rule<Layout>,
                  "shardwise::all_gather_matmul_both_sides: g does not have its rows cut over axis 0 (col_1d), or "
                  "a·gather(g) or gather(g)·b is not a 1-D product that sums nothing (A, Layout and B in the "
                  "instantiation above; see docs/tensor-parallel.md, Collective matmul)");
    return std::pair{detail::stand_in_for_refused_product(g), detail::stand_in_for_refused_product(g)};
  }
} catch (...) {
  rethrow_within_call(world_rank_of(g), call_text("all_gather_matmul_both_sides",
                                                  detail::product_operand<Left>::describe(a) + ", " + describe(g) +
                                                      ", " + detail::product_operand<Right>::describe(b)));
}

// Σᵢ op(Aᵢ) · op(Bᵢ), each pair's inner dimension cut over axis 0 by both, reduce-scattered over the
// result's rows in one ring (each step's share the sum of the pairs' GEMMs): the input gradient of
// linears that read one input, as Q, K and V do,
//   auto dx = matmul_reduce_scatter(std::tie(dq, dk, dv), std::tuple{transposed(wq), transposed(wk), transposed(wv)});
// where a call per pair would reduce-scatter three sums. Unfused: the products added while their sum is
// pending, then one reduce-scatter. Every pair gives the same result layout and shape.
template <class... Lefts, class... Rights>
requires(sizeof...(Lefts) == sizeof...(Rights) && sizeof...(Lefts) > 0)
[[nodiscard]] auto matmul_reduce_scatter(const std::tuple<Lefts...>& left_operands,
                                         const std::tuple<Rights...>& right_operands,
                                         collective_matmul_form form = collective_matmul_form::ring) try {
  if constexpr ((detail::scatters_sum<std::remove_cvref_t<Lefts>, std::remove_cvref_t<Rights>> && ...)) {
    const auto products = detail::scattered_pairs(left_operands, right_operands, std::index_sequence_for<Lefts...>{});
    return std::apply(
        [&](const auto& first, const auto&... others) {
          using result_layout = typename std::remove_cvref_t<decltype(first)>::result_layout;
          static_assert(
              (std::is_same_v<typename std::remove_cvref_t<decltype(others)>::result_layout, result_layout> && ...),
              "shardwise::matmul_reduce_scatter: the pairs' sums are reduce-scattered into different layouts "
              "(their operands' padding rules differ)");
          const int rank = world_rank_of(first.left);
          const matrix_extents shape = first.extents();
          [[maybe_unused]] const auto same_shape = [&](const matrix_extents each) {
            if (each.rows != shape.rows || each.cols != shape.cols)
              throw argument_error(rank, "matmul_reduce_scatter",
                                   "the products to sum are " + extents_string(shape) + " and " + extents_string(each));
          };
          (same_shape(others.extents()), ...);
          using T = typename std::remove_cvref_t<decltype(first.left)>::value_type;
          if (detail::unfused(form, rank, "matmul_reduce_scatter"))
            return detail::unfused_reduce_scatter<result_layout>(first, others...);
          return detail::ring_reduce_scatter<T, result_layout>(first.left.mesh(), shape, first, others...);
        },
        products);
  } else {
    static_assert(detail::no_collective_rule<std::tuple<Lefts...>>,
                  "shardwise::matmul_reduce_scatter: a pair is not a 1-D product whose inner dimension both "
                  "operands cut over axis 0 (Lefts and Rights in the instantiation above; see "
                  "docs/tensor-parallel.md, Collective matmul)");
  }
} catch (...) {
  const auto& first = std::get<0>(left_operands);
  rethrow_within_call(world_rank_of(detail::product_operand<std::remove_cvref_t<decltype(first)>>::tensor(first)),
                      call_text("matmul_reduce_scatter", detail::describe_pairs(left_operands, right_operands,
                                                                                std::index_sequence_for<Lefts...>{})));
}

// op(A) · op(B), whose inner dimension both cut over axis 0, with the sum reduce-scattered over the
// result's rows (col_1d) in a ring that overlaps the GEMMs (see the top of this file). The same values
// as redistribute<col_1d<Padding>>(matmul(a, b)) with the operands' rule, up to the order of the sum.
template <matmul_operand Left, matmul_operand Right>
[[nodiscard]] auto matmul_reduce_scatter(const Left& left_operand, const Right& right_operand,
                                         collective_matmul_form form = collective_matmul_form::ring) {
  return matmul_reduce_scatter(std::tie(left_operand), std::tie(right_operand), form);
}

// gather(op(A)) · op(Bᵢ) for each Bᵢ of a tuple, A (rows cut over axis 0) gathered once, in one ring,
// for all: the products of linears that read one input, as Q, K and V do,
//   auto [q, k, v] = all_gather_matmul(x, std::tie(wq, wk, wv));
//   auto [dwq, dwk, dwv] = all_gather_matmul(transposed(x), std::tie(dq, dk, dv));
// where a call each would gather x three times. Each result equals all_gather_matmul's of its pair, bit
// for bit.
template <matmul_operand Left, class... Rights>
requires(sizeof...(Rights) > 0)
[[nodiscard]] auto all_gather_matmul(const Left& left_operand, const std::tuple<Rights...>& right_operands,
                                     collective_matmul_form form = collective_matmul_form::ring) try {
  if constexpr ((detail::gathers_left_operand<Left, std::remove_cvref_t<Rights>> && ...)) {
    const auto& left = detail::product_operand<Left>::tensor(left_operand);
    return std::apply(
        [&](const auto&... right) {
          if (detail::unfused(form, world_rank_of(left), "all_gather_matmul")) {
            const auto whole = detail::all_gathered(left);
            return std::tuple{
                matmul(detail::maybe_transposed<detail::product_operand<Left>::transposed>(whole), right)...};
          }
          auto products = std::tuple{detail::gathered_operands(left_operand, right, "all_gather_matmul")...};
          std::apply([&](auto&... product) { detail::ring_all_gather(left, product...); }, products);
          return std::apply([](auto&... product) { return std::tuple{product.take_result()...}; }, products);
        },
        right_operands);
  } else {
    static_assert(detail::no_collective_rule<Left>,
                  "shardwise::all_gather_matmul: the left operand does not have its rows cut over axis 0 (col_1d) "
                  "such that, gathered, it makes with every right operand a 1-D product that sums nothing (Left "
                  "and Rights in the instantiation above; see docs/tensor-parallel.md, Collective matmul)");
    const auto& left = detail::product_operand<Left>::tensor(left_operand);
    return std::tuple{(static_cast<void>(std::type_identity<Rights>{}), detail::stand_in_for_refused_product(left))...};
  }
} catch (...) {
  std::string operands = detail::product_operand<Left>::describe(left_operand);
  std::apply(
      [&](const auto&... right) {
        ((operands += ", " + detail::product_operand<std::remove_cvref_t<decltype(right)>>::describe(right)), ...);
      },
      right_operands);
  rethrow_within_call(world_rank_of(detail::product_operand<Left>::tensor(left_operand)),
                      call_text("all_gather_matmul", operands));
}

}  // namespace shardwise
