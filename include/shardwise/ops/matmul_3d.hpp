#pragma once
// The 3-D paper's load-balanced products (Bian et al., Algorithms 1-6) on a p_x x p_y x p_z grid, for
// the layouts of cube_3d<directions<a, b, c>, Padding> (layout/cube_3d.hpp; the paper's default is
// (a, b, c) = (y, x, z)). Three forms, one routine: all-gather the left operand over one axis, the
// right over another, one local GEMM, reduce-scatter the result over the third.
//
//   form        operands                  gathers            result, reduce-scattered over
//   C = A·B     A: input,  B: weight      A over a, B over b   output, over c   (Algorithm 1)
//   dA = dC·Bᵀ  dC: output, B: weight     dC over c, B over b  input,  over a   (Algorithm 2, line 1)
//   dB = Aᵀ·dC  A: input,  dC: output     A over a, dC over c  weight, over b   (Algorithm 2, line 2)
//
// Per rank, with exact shapes, each form sends and receives (p_g - 1) times its block for each
// all-gather and reduce-scatter over an axis of p_g ranks: on a p x p x p cube (p - 1)(MN + NK + MK)/p³
// elements, the paper's count.
//
// Shapes that do not divide. The blocks are multiplied as stored, padding included (padding is held at
// zero, so it adds zeros). That is exact whenever, for each of the product's dimensions m, k, n, the
// two tensors that cut it store pieces of one size laid end to end over the same total extent: always
// for exact layouts, for padded layouts when the rounded-up extents agree (e.g. every dimension
// divisible by its parts, or p x p x p cubes for m), for ragged layouts when the pieces are equal.
// Otherwise — the general path — each operand is moved (one all_to_all_v each) into exact layouts of
// the dimensions rounded up to a multiple of both cuts, the product runs there on zero-padded blocks,
// and the result is moved back (one more all_to_all_v): about twice the traffic of the direct path,
// plus a little arithmetic on the rounding.
//
// matmul_options::chunks pipelines the reduce-scatter in bands of rows (cube_local_product below).
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "shardwise/layout/cube_3d.hpp"
#include "shardwise/layout/padding.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/ops/local_product.hpp"
#include "shardwise/tensor/dtensor.hpp"
#include "shardwise/tensor/exchange.hpp"

namespace shardwise::detail {

// How one 3-D product moves data: the mesh axis each operand is all-gathered over and whether the
// gathered pieces lie side by side (they cut the operand's columns) or one above the other (its rows);
// the axis the local result is reduce-scattered over and how the pieces of that cut lie.
struct cube_steps {
  std::size_t left_axis;
  bool left_side_by_side;
  std::size_t right_axis;
  bool right_side_by_side;
  std::size_t result_axis;
  bool result_side_by_side;
};

// Which 3-D form a pair of layouts makes, matched on the axes (a, b, c) of directions<a, b, c> (see
// cube_3d.hpp for the layouts written with them). Pairs of other layouts have no 3-D product.
template <class Left, class Right, bool TransposeLeft, bool TransposeRight>
struct cube_product {
  static constexpr bool exists = false;
};

// C = A·B: A input (rows over (b, a), columns over c), B weight (rows over c, columns over (a, b)).
// Gathering A over a leaves its rows over b; B over b leaves its columns over a; the local GEMM sums
// over A's columns cut over c, so the sum over c completes it.
template <std::size_t a, std::size_t b, std::size_t c, class Padding>
struct cube_product<split<rows_over<b, a>, cols_over<c>, Padding>, split<rows_over<c>, cols_over<a, b>, Padding>,
                    false, false> {
  static constexpr bool exists = true;
  using result = typename cube_3d<directions<a, b, c>, Padding>::output;
  static constexpr cube_steps steps{a, false, b, true, c, false};
};

// dA = dC·Bᵀ: dC output (rows over (b, c), columns over a), B weight. dC gathered over c: rows over b;
// B over b: columns over a, which Bᵀ contracts with dC's columns; the sum over a completes it.
template <std::size_t a, std::size_t b, std::size_t c, class Padding>
struct cube_product<split<rows_over<b, c>, cols_over<a>, Padding>, split<rows_over<c>, cols_over<a, b>, Padding>,
                    false, true> {
  static constexpr bool exists = true;
  using result = typename cube_3d<directions<a, b, c>, Padding>::input;
  static constexpr cube_steps steps{c, false, b, true, a, false};
};

// dB = Aᵀ·dC: A input, dC output; both gathered to rows over b (A over a, dC over c), so Aᵀ·dC
// contracts over b, and the reduce-scatter over b cuts the result's columns.
template <std::size_t a, std::size_t b, std::size_t c, class Padding>
struct cube_product<split<rows_over<b, a>, cols_over<c>, Padding>, split<rows_over<b, c>, cols_over<a>, Padding>,
                    true, false> {
  static constexpr bool exists = true;
  using result = typename cube_3d<directions<a, b, c>, Padding>::weight;
  static constexpr cube_steps steps{a, false, c, false, b, true};
};

// `count` row-major blocks of rows x cols, side by side: one matrix of rows x (count * cols). With
// count 1, simply a matrix.
template <class T>
struct side_by_side_blocks {
  T* data;
  std::int64_t rows;
  std::int64_t cols;
  std::int64_t count;

  // Tile (r, c) when the rows are cut into row_parts and the columns into col_parts equal parts;
  // col_parts is 1 or count when count > 1 (a tile never straddles two blocks).
  [[nodiscard]] strided_map<T> tile(std::int64_t r, std::int64_t row_parts, std::int64_t c,
                                    std::int64_t col_parts) const {
    const std::int64_t height = rows / row_parts;
    const std::int64_t width = count > 1 ? cols : cols / col_parts;
    const std::int64_t block = count > 1 ? c : 0;
    const std::int64_t first_col = count > 1 ? 0 : c * width;
    return {data + block * rows * cols + r * height * cols + first_col, height, width, Eigen::OuterStride<>(cols)};
  }
};

// Starts all-gathering `piece` (stored rows x cols) over `axis` into the reusable buffer `slot`: the
// blocks it will fill, and the request to wait for.
template <class T, class Communicator>
auto start_gather(Communicator& axis, std::span<const T> piece, std::int64_t rows, std::int64_t cols,
                  bool side_by_side, buffer slot) {
  const std::int64_t parts = axis.size();
  const std::span<T> gathered = workspace<T>(slot, piece.size() * static_cast<std::size_t>(parts));
  const side_by_side_blocks<const T> blocks =
      side_by_side ? side_by_side_blocks<const T>{gathered.data(), rows, cols, parts}
                   : side_by_side_blocks<const T>{gathered.data(), rows * parts, cols, 1};
  return std::pair{blocks, axis.iall_gather(piece, gathered)};
}

// The one 3-D routine: gathers, local GEMM, reduce-scatter into `result` (this rank's stored block).
// Every rank's stored blocks of one tensor have the same extents here (the caller made sure).
//
// With `chunks` > 1 the reduce-scatter is pipelined: each destination's block of the local product is
// cut into `chunks` bands of rows (as even as the rows allow; never more bands than rows), and band j
// of every destination is computed, laid out as its own reduce-scatter's input, and started
// (ireduce_scatter) before band j + 1 is computed, so the sum of one band travels while the next is
// multiplied. Started bands are tested after each band's GEMM: the threads backend (and MPI's large
// messages) move data only inside calls into the communicator. With one band it is the plain product:
// one GEMM per tile and one blocking reduce-scatter.
template <cube_steps Steps, bool TransposeLeft, bool TransposeRight, class T, class Mesh>
void cube_local_product(Mesh& mesh, std::span<const T> left, const block_info& left_block, std::span<const T> right,
                        const block_info& right_block, std::span<T> result, int chunks) {
  // Bands cut the product's rows, so the left operand's pieces lie one above the other (as in all three
  // cube forms); and a dimension of the product is cut into tiles by at most one of the right operand's
  // side-by-side pieces and the result's.
  static_assert(!Steps.left_side_by_side,
                "shardwise: the 3-D product gathers its left operand one piece above the other (as all three "
                "cube forms do)");
  static_assert(!(Steps.right_side_by_side && !TransposeRight && Steps.result_side_by_side),
                "shardwise: an operand and the result cut the columns of a 3-D product differently");
  // Both gathers in flight at once (they run on different axes).
  auto [l, left_arrival] = start_gather(mesh.axis(static_cast<int>(Steps.left_axis)), left, left_block.stored_rows,
                                        left_block.stored_cols, Steps.left_side_by_side, buffer::left);
  auto [r, right_arrival] = start_gather(mesh.axis(static_cast<int>(Steps.right_axis)), right,
                                         right_block.stored_rows, right_block.stored_cols, Steps.right_side_by_side,
                                         buffer::right);
  left_arrival.wait();
  right_arrival.wait();

  auto& scatter_axis = mesh.axis(static_cast<int>(Steps.result_axis));
  const std::int64_t rows = TransposeLeft ? l.cols : l.rows;
  const std::int64_t cols = TransposeRight ? r.rows : r.cols * r.count;
  const std::span<T> local = workspace<T>(buffer::product, static_cast<std::size_t>(rows * cols));
  // Each destination's block of the local product: block_rows x block_cols.
  const std::int64_t destinations = scatter_axis.size();
  const std::int64_t scatter_parts = Steps.result_side_by_side ? destinations : 1;
  const std::int64_t block_rows = Steps.result_side_by_side ? rows : rows / destinations;
  const std::int64_t block_cols = cols / scatter_parts;

  // Tiles of the product's dimensions k and n: each follows the one operand (if any) whose pieces cut it.
  const std::int64_t k_parts = TransposeRight ? r.count : 1;
  const std::int64_t n_parts = (TransposeRight ? 1 : r.count) * scatter_parts;
  const std::int64_t bands = std::clamp<std::int64_t>(chunks, 1, std::max<std::int64_t>(block_rows, 1));
  std::vector<typename std::remove_reference_t<decltype(scatter_axis)>::request> started;
  started.reserve(static_cast<std::size_t>(bands));
  for (std::int64_t band = 0; band < bands; ++band) {
    const std::int64_t first_row = band * block_rows / bands;
    const std::int64_t band_rows = (band + 1) * block_rows / bands - first_row;
    // Band `band` of every destination's block, one after another: its reduce-scatter's input.
    T* const band_data = local.data() + destinations * first_row * block_cols;
    const side_by_side_blocks<T> out{band_data, band_rows * (destinations / scatter_parts), block_cols,
                                     scatter_parts};
    // Destinations stacked one above the other are separate rows of the product unless a band holds
    // all their rows.
    const std::int64_t row_groups = scatter_parts == 1 && band_rows < block_rows ? destinations : 1;
    for (std::int64_t g = 0; g < row_groups; ++g)
      for (std::int64_t in = 0; in < n_parts; ++in)
        for (std::int64_t ik = 0; ik < k_parts; ++ik) {
          const auto left_tile = TransposeLeft ? l.tile(ik, k_parts, 0, 1) : l.tile(0, 1, ik, k_parts);
          multiply<false, TransposeRight>(
              out.tile(g, row_groups, in, n_parts),
              oriented<TransposeLeft>(left_tile).middleRows(g * block_rows + first_row, out.rows / row_groups),
              TransposeRight ? r.tile(in, n_parts, ik, k_parts) : r.tile(ik, k_parts, in, n_parts), ik > 0);
        }

    const std::span<const T> band_sums(band_data, static_cast<std::size_t>(destinations * band_rows * block_cols));
    const std::span<T> band_result = result.subspan(static_cast<std::size_t>(first_row * block_cols),
                                                    static_cast<std::size_t>(band_rows * block_cols));
    if (bands == 1) {
      scatter_axis.reduce_scatter(band_sums, band_result);
    } else {
      started.push_back(scatter_axis.ireduce_scatter(band_sums, band_result));
      for (auto& earlier : started) earlier.test();
    }
  }
  for (auto& band : started) band.wait();
}

// How many parts a layout cuts its rows (or columns) into on `grid`.
template <class Layout, std::size_t D>
[[nodiscard]] std::int64_t cut_parts(const coordinates<D>& grid, bool columns) {
  std::int64_t parts = 1;
  if (columns) {
    for (const std::size_t axis : Layout::col_axes) parts *= grid[axis];
  } else {
    for (const std::size_t axis : Layout::row_axes) parts *= grid[axis];
  }
  return parts;
}

// The extent n elements cut into `parts` occupy in storage, when the stored pieces are all alike and
// lie end to end (n rounded up under padded); -1 when they are not (ragged pieces of two sizes).
template <padding_rule Rule>
[[nodiscard]] std::int64_t stored_extent(std::int64_t n, std::int64_t parts) {
  const std::int64_t size = Rule::cut(n, parts, 0).stored;
  for (std::int64_t k = 0; k < parts; ++k) {
    const piece p = Rule::cut(n, parts, k);
    if (p.stored != size || (p.extent > 0 && p.offset != k * size)) return -1;
  }
  return parts * size;
}

// split<Rows, Cols, Padding> with another padding rule.
template <class Layout, class Padding>
struct with_padding;
template <class Rows, class Cols, class Old, class Padding>
struct with_padding<split<Rows, Cols, Old>, Padding> {
  using type = split<Rows, Cols, Padding>;
};

// Moves `tensor` into a tensor of Layout and `extents` on the same mesh (see the top of this file).
template <class Layout, class T, class From, class Mesh>
[[nodiscard]] dtensor<T, Layout, Mesh> moved_into(const dtensor<T, From, Mesh>& tensor, matrix_extents extents) {
  dtensor<T, Layout, Mesh> moved(tensor.mesh(), extents);
  exchange(tensor.mesh(), tensor.mapping(), tensor.data(), moved.mapping(), moved.data(), "matmul");
  return moved;
}

template <bool TransposeLeft, bool TransposeRight, class T, class LeftLayout, class RightLayout, class Mesh>
[[nodiscard]] auto cube_matmul(const dtensor<T, LeftLayout, Mesh>& left, const dtensor<T, RightLayout, Mesh>& right,
                               int chunks) {
  using rule = cube_product<LeftLayout, RightLayout, TransposeLeft, TransposeRight>;
  using result_layout = typename rule::result;
  using padding = typename result_layout::padding;
  constexpr cube_steps steps = rule::steps;
  Mesh& mesh = left.mesh();
  const matrix_extents shape = product_extents<TransposeLeft, TransposeRight>(left, right);
  const coordinates<3>& grid = mesh.shape();

  // Each dimension m, k, n and the parts each of the two tensors that cut it cut it into.
  struct dimension {
    std::int64_t extent;
    std::int64_t parts_one;
    std::int64_t parts_other;
  };
  const std::int64_t inner = TransposeLeft ? left.rows() : left.cols();
  const std::array<dimension, 3> dimensions{{
      {shape.rows, cut_parts<LeftLayout>(grid, TransposeLeft), cut_parts<result_layout>(grid, false)},
      {inner, cut_parts<LeftLayout>(grid, !TransposeLeft), cut_parts<RightLayout>(grid, TransposeRight)},
      {shape.cols, cut_parts<RightLayout>(grid, !TransposeRight), cut_parts<result_layout>(grid, true)}}};
  bool lines_up = true;
  for (const dimension& d : dimensions) {
    const std::int64_t one = stored_extent<padding>(d.extent, d.parts_one);
    lines_up = lines_up && one >= 0 && one == stored_extent<padding>(d.extent, d.parts_other);
  }
  if (lines_up) {
    dtensor<T, result_layout, Mesh> result(mesh, shape);
    cube_local_product<steps, TransposeLeft, TransposeRight>(mesh, left.data(), left.block(), right.data(),
                                                             right.block(), result.data(), chunks);
    return result;
  }

  // The general path: exact layouts of the dimensions rounded up to a multiple of both cuts.
  std::array<std::int64_t, 3> rounded{};
  for (std::size_t d = 0; d < 3; ++d) {
    const std::int64_t unit = std::lcm(dimensions[d].parts_one, dimensions[d].parts_other);
    rounded[d] = (dimensions[d].extent + unit - 1) / unit * unit;
  }
  const auto [m, k, n] = rounded;
  using exact_left = typename with_padding<LeftLayout, exact>::type;
  using exact_right = typename with_padding<RightLayout, exact>::type;
  using exact_result = typename with_padding<result_layout, exact>::type;
  const auto l = moved_into<exact_left>(left, TransposeLeft ? matrix_extents{k, m} : matrix_extents{m, k});
  const auto r = moved_into<exact_right>(right, TransposeRight ? matrix_extents{n, k} : matrix_extents{k, n});
  dtensor<T, exact_result, Mesh> product(mesh, {m, n});
  cube_local_product<steps, TransposeLeft, TransposeRight>(mesh, l.data(), l.block(), r.data(), r.block(),
                                                           product.data(), chunks);
  return moved_into<result_layout>(product, shape);
}

}  // namespace shardwise::detail
