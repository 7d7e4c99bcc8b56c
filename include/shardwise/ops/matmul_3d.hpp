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
// matmul_options::chunks pipelines the product in bands of rows (cube_local_product below): the left
// operand's all-gather, the GEMM and the reduce-scatter, band by band.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "shardwise/core/checked_arithmetic.hpp"
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

// Starts all-gathering `piece` (stored rows x cols) over `axis` into `gathered` (room for every rank's
// piece): the blocks it will fill, and the request to wait for.
template <class T, class Communicator>
auto start_gather(Communicator& axis, std::span<const T> piece, std::int64_t rows, std::int64_t cols,
                  bool side_by_side, std::span<T> gathered) {
  const std::int64_t parts = axis.size();
  const side_by_side_blocks<const T> blocks =
      side_by_side ? side_by_side_blocks<const T>{gathered.data(), rows, cols, parts}
                   : side_by_side_blocks<const T>{gathered.data(), rows * parts, cols, 1};
  return std::pair{blocks, axis.iall_gather(piece, gathered.first(piece.size() * static_cast<std::size_t>(parts)))};
}

// One step of the pipelined 3-D product: rows first .. first + rows of every strip, when a matrix's
// rows are strips of `height` rows one above the other (see cube_local_product).
struct band_of_strips {
  std::int64_t height;
  std::int64_t first;
  std::int64_t rows;

  // The band's rows of each of the `strips` strips of `whole` (its columns when Transposed), strip after
  // strip, into `band`; and back.
  template <bool Transposed, class Whole, class Band>
  void pack(const Whole& whole, Band& band, std::int64_t strips) const {
    for (std::int64_t s = 0; s < strips; ++s)
      rows_of<Transposed>(band, s * rows, rows) = rows_of<Transposed>(whole, s * height + first, rows);
  }
  template <class Band, class Whole>
  void unpack(const Band& band, Whole& whole, std::int64_t strips) const {
    for (std::int64_t s = 0; s < strips; ++s)
      whole.middleRows(s * height + first, rows) = band.middleRows(s * rows, rows);
  }
};

// The one 3-D routine: gathers, local GEMM, reduce-scatter into `result` (this rank's stored block).
// Every rank's stored blocks of one tensor have the same extents here (the caller made sure).
//
// With `chunks` > 1 it is a pipeline over the local product's rows. Two cuts divide those rows: the
// ranks the left operand is gathered from (its pieces lie one above the other, as in all three cube
// forms; transposed, it cuts the inner dimension instead and leaves the rows whole), and the ranks the
// result is reduce-scattered to (unless its pieces lie side by side). Strips, the finer of the two cuts
// (the lcm of the two counts), line them up: every source and every destination holds whole strips.
// Band j is rows j·h/n .. (j + 1)·h/n of every strip of h rows (n bands, never more than h), and step j
//   - starts gathering band j + 1 of the left operand: each rank sends its strips' rows of the band
//     (copied together first when they do not lie together: several strips, or a transposed left
//     operand's columns) and receives the band of every strip, strip after strip;
//   - waits for band j and multiplies it by the whole right operand: band j of the local product, strip
//     after strip, which is destination after destination, the input of its own reduce-scatter;
//   - starts that reduce-scatter (ireduce_scatter) into this rank's rows of the band (copied into place
//     at the end when this rank's block has several strips).
// So band j + 1 of the left operand travels while band j is multiplied, and the sums of band j travel
// while band j + 1 is. The right operand is gathered whole, beside the left operand's first band: every
// band multiplies all of it. Held at once: the gathered right operand, two bands of the gathered left
// operand (and two of this rank's own, when copied together), the whole local product (a band's sums
// stay until its reduce-scatter has ended), and a copy of the result block when its rows are copied into
// place. Started reduce-scatters are tested after each band's GEMM, since the threads backend (and MPI's
// large messages) move data only inside calls into the communicator; not on simulated GPUs, where data
// move anyway and a test that succeeds would move the host's virtual clock to the band's end. With one
// band it is the plain product: both whole gathers in flight at once, one GEMM per tile and one
// blocking reduce-scatter.
template <cube_steps Steps, bool TransposeLeft, bool TransposeRight, class T, class Mesh>
void cube_local_product(Mesh& mesh, std::span<const T> left, const block_info& left_block, std::span<const T> right,
                        const block_info& right_block, std::span<T> result, int chunks) {
  // A dimension of the product is cut into tiles by at most one of the right operand's side-by-side
  // pieces and the result's.
  static_assert(!Steps.left_side_by_side,
                "shardwise: the 3-D product gathers its left operand one piece above the other (as all three "
                "cube forms do)");
  static_assert(!(Steps.right_side_by_side && !TransposeRight && Steps.result_side_by_side),
                "shardwise: an operand and the result cut the columns of a 3-D product differently");
  auto& left_axis = mesh.axis(static_cast<int>(Steps.left_axis));
  auto& right_axis = mesh.axis(static_cast<int>(Steps.right_axis));
  auto& scatter_axis = mesh.axis(static_cast<int>(Steps.result_axis));
  using axis_type = std::remove_reference_t<decltype(scatter_axis)>;
  auto [r, right_arrival] =
      start_gather(right_axis, right, right_block.stored_rows, right_block.stored_cols, Steps.right_side_by_side,
                   workspace<T>(buffer::right, right.size() * static_cast<std::size_t>(right_axis.size())));

  const std::int64_t sources = left_axis.size();
  const std::int64_t destinations = scatter_axis.size();
  const std::int64_t own_rows = left_block.stored_rows;
  const std::int64_t own_cols = left_block.stored_cols;
  const std::int64_t rows = TransposeLeft ? own_cols : sources * own_rows;
  const std::int64_t cols = TransposeRight ? r.rows : r.cols * r.count;
  const std::int64_t scatter_parts = Steps.result_side_by_side ? destinations : 1;
  const std::int64_t block_cols = cols / scatter_parts;
  const std::int64_t strips = std::lcm(TransposeLeft ? 1 : sources, destinations / scatter_parts);
  const std::int64_t height = rows / strips;
  const std::int64_t own_strips = TransposeLeft ? strips : strips / sources;
  const std::int64_t result_strips = strips * scatter_parts / destinations;
  const std::int64_t bands = std::clamp<std::int64_t>(chunks, 1, std::max<std::int64_t>(height, 1));
  const auto band_of = [&](std::int64_t band) {
    const std::int64_t first = band * height / bands;
    return band_of_strips{height, first, (band + 1) * height / bands - first};
  };

  // Slots for the left operand's bands, one multiplied while the next arrives, and as many for this
  // rank's own when they are copied together.
  const bool own_bands_copied = bands > 1 && (TransposeLeft || own_strips > 1);
  const auto slot_count = static_cast<std::size_t>(std::min<std::int64_t>(bands, 2));
  const std::int64_t widest_band = (height + bands - 1) / bands;
  const auto own_band_size =
      static_cast<std::size_t>(own_strips * widest_band * (TransposeLeft ? own_rows : own_cols));
  const std::size_t gathered_band_size = own_band_size * static_cast<std::size_t>(sources);
  const std::span<T> slots =
      workspace<T>(buffer::left, slot_count * (gathered_band_size + (own_bands_copied ? own_band_size : 0)));
  const strided_map<const T> own(left.data(), own_rows, own_cols, Eigen::OuterStride<>(own_cols));
  const auto start_band = [&](std::int64_t band) {
    const band_of_strips b = band_of(band);
    const std::int64_t piece_rows = TransposeLeft ? own_rows : own_strips * b.rows;
    const std::int64_t piece_cols = TransposeLeft ? own_strips * b.rows : own_cols;
    const auto size = static_cast<std::size_t>(piece_rows * piece_cols);
    const auto slot = static_cast<std::size_t>(band % 2);
    std::span<const T> piece = left.subspan(static_cast<std::size_t>(TransposeLeft ? 0 : b.first * own_cols), size);
    if (own_bands_copied) {
      const std::span<T> copy = slots.subspan(slot_count * gathered_band_size + slot * own_band_size, size);
      strided_map<T> together(copy.data(), piece_rows, piece_cols, Eigen::OuterStride<>(piece_cols));
      b.pack<TransposeLeft>(own, together, own_strips);
      piece = copy;
    }
    return start_gather(left_axis, piece, piece_rows, piece_cols, false,
                        slots.subspan(slot * gathered_band_size, gathered_band_size));
  };

  // The local product, band after band; and, when this rank's rows of a band are copied into place, its
  // bands of the result as they arrive.
  const bool result_bands_copied = bands > 1 && result_strips > 1;
  const std::span<T> sums =
      workspace<T>(buffer::product, static_cast<std::size_t>(rows * cols) + (result_bands_copied ? result.size() : 0));
  const std::span<T> arrived = sums.subspan(static_cast<std::size_t>(rows * cols));
  // Tiles of the product's dimensions k and n: each follows the one operand (if any) whose pieces cut it.
  const std::int64_t k_parts = TransposeRight ? r.count : 1;
  const std::int64_t n_parts = (TransposeRight ? 1 : r.count) * scatter_parts;
  std::vector<typename axis_type::request> started;
  started.reserve(static_cast<std::size_t>(bands));
  auto next = start_band(0);
  right_arrival.wait();
  for (std::int64_t band = 0; band < bands; ++band) {
    auto [l, left_arrival] = std::move(next);
    if (band + 1 < bands) next = start_band(band + 1);
    left_arrival.wait();
    const band_of_strips b = band_of(band);
    T* const band_data = sums.data() + strips * b.first * cols;
    const side_by_side_blocks<T> out{band_data, strips * b.rows, block_cols, scatter_parts};
    for (std::int64_t in = 0; in < n_parts; ++in)
      for (std::int64_t ik = 0; ik < k_parts; ++ik)
        multiply<TransposeLeft, TransposeRight>(
            scatter_axis, out.tile(0, 1, in, n_parts),
            TransposeLeft ? l.tile(ik, k_parts, 0, 1) : l.tile(0, 1, ik, k_parts),
            TransposeRight ? r.tile(in, n_parts, ik, k_parts) : r.tile(ik, k_parts, in, n_parts), ik > 0);

    const auto band_size = static_cast<std::size_t>(result_strips * b.rows * block_cols);
    const std::span<const T> band_sums(band_data, band_size * static_cast<std::size_t>(destinations));
    const std::span<T> band_result = (result_bands_copied ? arrived : result)
                                         .subspan(static_cast<std::size_t>(result_strips * b.first * block_cols),
                                                  band_size);
    if (bands == 1) {
      scatter_axis.reduce_scatter(band_sums, band_result);
    } else {
      started.push_back(scatter_axis.ireduce_scatter(band_sums, band_result));
      if constexpr (!launches_kernels<axis_type>)
        for (auto& earlier : started) earlier.test();
    }
  }
  for (auto& band : started) band.wait();
  if (result_bands_copied) {
    strided_map<T> whole(result.data(), result_strips * height, block_cols, Eigen::OuterStride<>(block_cols));
    for (std::int64_t band = 0; band < bands; ++band) {
      const band_of_strips b = band_of(band);
      b.unpack(strided_map<const T>(arrived.data() + result_strips * b.first * block_cols, result_strips * b.rows,
                                    block_cols, Eigen::OuterStride<>(block_cols)),
               whole, result_strips);
    }
  }
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
    rounded[d] = require_fits(
        product_if_fits(ceil_divide(dimensions[d].extent, unit), unit), mesh.world().world_rank(), "matmul", [&] {
          return "the product's dimension of " + std::to_string(dimensions[d].extent) +
                 ", rounded up to a multiple of " + std::to_string(unit) + ", does not fit in 64 bits";
        });
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
