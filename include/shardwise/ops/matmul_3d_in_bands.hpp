#pragma once
// The 3-D product pipelined in bands of the local product's rows (matmul_options::chunks), built from
// the steps of the plain product (ops/matmul_3d_steps.hpp): A's gather along y, the local product and
// C's reduce-scatter along z go band by band, B is gathered whole.
//
// Two cuts divide the local product's rows: the ranks along y that A_il's pieces come from (one above
// the other in all three forms; when A is transposed its pieces cut the inner dimension instead and
// leave the rows whole), and the ranks along z that C's parts go to (unless they lie side by side).
// Strips, the finer of the two cuts (the lcm of the two counts), line them up: every source and every
// destination holds whole strips. Band j is rows j·h/n .. (j + 1)·h/n of every strip of h rows (n bands,
// never more than h), and step j
//   - starts gathering band j + 1 of A along y: each rank sends its strips' rows of the band (copied
//     together first, by a kernel, when they do not lie together: several strips, or a transposed A's
//     columns) and receives the band of every strip, strip after strip;
//   - waits for band j and multiplies it by the whole B_lj: band j of C_ij^(l), strip after strip, which
//     is destination after destination, the input of its own reduce-scatter;
//   - starts that reduce-scatter along z into this rank's rows of the band (copied into place by one
//     kernel at the end when this rank's block of C has several strips).
// So band j + 1 of A travels while band j is multiplied, and the sums of band j travel while band j + 1
// is. B is gathered whole, beside A's first band: every band multiplies all of it. Held at once: B_lj,
// two bands of A_il (and two of this rank's own, when copied together), the whole C_ij^(l) (a band's
// sums stay until its reduce-scatter has ended), and a copy of the result block when its rows are copied
// into place. Started reduce-scatters are tested after each band's GEMM, since the threads backend (and
// MPI's large messages) move data only inside calls into the communicator; not on simulated GPUs, where
// data move anyway and a test that succeeds would move the host's virtual clock to the band's end. With
// one band it is the plain product.
#include <Eigen/Core>
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "shardwise/core/kernel.hpp"
#include "shardwise/layout/layout.hpp"
#include "shardwise/ops/local_product.hpp"
#include "shardwise/ops/matmul_3d_steps.hpp"

namespace shardwise::detail {

// One band: rows first .. first + rows of every strip of `height` rows.
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

// The local product's rows cut into strips and bands.
struct strips_and_bands {
  std::int64_t strips;         // the lcm of the sources' and the destinations' cuts of the rows
  std::int64_t height;         // rows of a strip
  std::int64_t own_strips;     // strips of this rank's piece of A_il (the rows of op(A_ijl))
  std::int64_t result_strips;  // strips of this rank's block of C
  std::int64_t bands;

  [[nodiscard]] band_of_strips band(std::int64_t j) const {
    const std::int64_t first = j * height / bands;
    return {height, first, (j + 1) * height / bands - first};
  }
  [[nodiscard]] std::int64_t widest_band() const { return (height + bands - 1) / bands; }
};

// The strips and bands of a local product of `rows` rows, A's pieces coming from `sources` ranks along
// y and C's parts going to `destinations` along z, in at most `chunks` bands.
template <cube_steps Steps, bool TransposeA>
[[nodiscard]] strips_and_bands cut_into_bands(std::int64_t rows, std::int64_t sources, std::int64_t destinations,
                                              int chunks) {
  const std::int64_t row_sources = TransposeA ? 1 : sources;
  const std::int64_t row_destinations = Steps.c_side_by_side ? 1 : destinations;
  const std::int64_t strips = std::lcm(row_sources, row_destinations);
  const std::int64_t height = rows / strips;
  return {strips, height, strips / row_sources, strips / row_destinations,
          std::clamp<std::int64_t>(chunks, 1, std::max<std::int64_t>(height, 1))};
}

// Band j of A_il and this rank's piece of it: the rows of the band in this rank's strips of A_ijl (its
// columns, when A is transposed), copied together when they do not lie together; and two slots the
// bands of A_il land in, one multiplied while the next arrives.
template <class T, bool TransposeA>
class bands_of_a {
 public:
  bands_of_a(std::span<const T> a, const block_info& block, const strips_and_bands& cut, std::int64_t sources)
      : a_(a.data(), block.stored_rows, block.stored_cols, Eigen::OuterStride<>(block.stored_cols)),
        cut_(cut),
        copied_(TransposeA || cut.own_strips > 1),
        own_size_(static_cast<std::size_t>(cut.own_strips * cut.widest_band() *
                                           (TransposeA ? block.stored_rows : block.stored_cols))),
        gathered_size_(own_size_ * static_cast<std::size_t>(sources)),
        slots_(workspace<T>(buffer::left, 2 * (gathered_size_ + (copied_ ? own_size_ : 0)))) {}

  // This rank's piece of band j, as `y` sends it; when copied together, the copy is a kernel whose
  // result y sends.
  template <class Carrier>
  [[nodiscard]] side_by_side_blocks<const T> own_piece(Carrier& y, std::int64_t j) {
    const band_of_strips band = cut_.band(j);
    const std::int64_t rows = TransposeA ? a_.rows() : cut_.own_strips * band.rows;
    const std::int64_t cols = TransposeA ? cut_.own_strips * band.rows : a_.cols();
    if (!copied_) return {a_.data() + band.first * a_.cols(), rows, cols, 1};
    T* const copy = slots_.data() + 2 * gathered_size_ + slot(j) * own_size_;
    run_copy<T>(y, rows * cols, "band of A", [&] {
      strided_map<T> together(copy, rows, cols, Eigen::OuterStride<>(cols));
      band.pack<TransposeA>(a_, together, cut_.own_strips);
    });
    return {copy, rows, cols, 1};
  }
  // Where band j of A_il lands.
  [[nodiscard]] std::span<T> room(std::int64_t j) const {
    return slots_.subspan(slot(j) * gathered_size_, gathered_size_);
  }

 private:
  static std::size_t slot(std::int64_t j) { return static_cast<std::size_t>(j % 2); }

  strided_map<const T> a_;
  strips_and_bands cut_;
  bool copied_;
  std::size_t own_size_;
  std::size_t gathered_size_;
  std::span<T> slots_;
};

// C_ij^(l) band by band, and this rank's rows of each band of C_ilj: band j's addends are the band's rows
// of every strip, destination after destination; its sums arrive in place when this rank's block of C is
// one strip, else beside the addends, put in place at the end.
template <cube_steps Steps, class T>
class bands_of_c {
 public:
  template <class Mesh>
  bands_of_c(Mesh& mesh, std::int64_t rows, std::int64_t cols, const strips_and_bands& cut, std::span<T> c)
      : cut_(cut),
        c_(c),
        copied_(cut.result_strips > 1),
        held_(workspace<T>(buffer::product, static_cast<std::size_t>(rows * cols) + (copied_ ? c.size() : 0))),
        addends_(addends_of_c<Steps>(mesh, held_.data(), rows, cols)),
        arrived_(held_.subspan(static_cast<std::size_t>(rows * cols))) {}

  // Band j of C_ij^(l), to compute.
  [[nodiscard]] side_by_side_blocks<T> addends(std::int64_t j) const {
    const band_of_strips band = cut_.band(j);
    return {addends_.data + cut_.strips * band.first * addends_.cols * addends_.count, cut_.strips * band.rows,
            addends_.cols, addends_.count};
  }
  // Band j of C_ij^(l), as its reduce-scatter sends it.
  [[nodiscard]] std::span<const T> addends_sent(std::int64_t j) const {
    const side_by_side_blocks<T> band = addends(j);
    return {band.data, static_cast<std::size_t>(band.rows * band.cols * band.count)};
  }
  // Where this rank's rows of band j of C_ilj arrive.
  [[nodiscard]] std::span<T> sums(std::int64_t j) const {
    const band_of_strips band = cut_.band(j);
    return (copied_ ? arrived_ : c_)
        .subspan(static_cast<std::size_t>(cut_.result_strips * band.first * addends_.cols),
                 static_cast<std::size_t>(cut_.result_strips * band.rows * addends_.cols));
  }
  // Every band's rows of this rank's block of C, from where they arrived to their strips: one kernel,
  // over `z`, which delivered them.
  template <class Carrier>
  void put_in_place(Carrier& z) const {
    if (!copied_) return;
    const std::int64_t width = addends_.cols;
    const std::int64_t rows = cut_.result_strips * cut_.height;
    run_copy<T>(z, rows * width, "band sums", [&] {
      strided_map<T> whole(c_.data(), rows, width, Eigen::OuterStride<>(width));
      for (std::int64_t j = 0; j < cut_.bands; ++j) {
        const band_of_strips band = cut_.band(j);
        band.unpack(strided_map<const T>(arrived_.data() + cut_.result_strips * band.first * width,
                                         cut_.result_strips * band.rows, width, Eigen::OuterStride<>(width)),
                    whole, cut_.result_strips);
      }
    });
  }

 private:
  strips_and_bands cut_;
  std::span<T> c_;
  bool copied_;
  std::span<T> held_;
  side_by_side_blocks<T> addends_;  // all of C_ij^(l): rows x cols, in z's destinations' parts
  std::span<T> arrived_;
};

// The plain product's steps, band by band (see the top of this file).
template <cube_steps Steps, bool TransposeA, bool TransposeB, class T, class Mesh>
void cube_multiply_in_bands(Mesh& mesh, std::span<const T> a, const block_info& a_block, std::span<const T> b,
                            const block_info& b_block, std::span<T> c, int chunks) {
  auto& y = mesh.axis(static_cast<int>(Steps.y));
  auto& z = mesh.axis(static_cast<int>(Steps.z));
  using axis_type = std::remove_reference_t<decltype(z)>;
  const std::int64_t rows = TransposeA ? a_block.stored_cols : y.size() * a_block.stored_rows;
  const strips_and_bands cut = cut_into_bands<Steps, TransposeA>(rows, y.size(), z.size(), chunks);
  if (cut.bands == 1) return cube_multiply<Steps, TransposeA, TransposeB>(mesh, a, a_block, b, b_block, c);

  // B_lji -> B_lj along x, whole
  auto [b_lj, b_arrival] = gather_b_along_x<Steps>(mesh, b, b_block);
  bands_of_a<T, TransposeA> a_il(a, a_block, cut, y.size());
  const bands_of_c<Steps, T> c_ij(mesh, rows, cols_of_op<TransposeB>(b_lj), cut, c);
  // band j of A_ijl -> band j of A_il along y, started
  const auto gather_band_of_a = [&](std::int64_t j) {
    return gather_a_along_y<Steps>(mesh, a_il.own_piece(y, j), a_il.room(j));
  };
  std::vector<typename axis_type::request> started;
  started.reserve(static_cast<std::size_t>(cut.bands));
  auto next = gather_band_of_a(0);
  for (std::int64_t j = 0; j < cut.bands; ++j) {
    // NOLINTNEXTLINE(bugprone-use-after-move): `next` is started anew for every band but the last
    auto [a_band, a_arrival] = std::move(next);
    if (j + 1 < cut.bands) next = gather_band_of_a(j + 1);
    // B's wait comes after the second band's start: waited for before it, a longer gather of B held
    // back the copy that band starts with, on a GPU's stream, or the gather itself, on a host.
    if (j == 0) b_arrival.wait();
    a_arrival.wait();
    // band j of C_ij^(l) = op(band j of A_il)·op(B_lj)
    local_product<TransposeA, TransposeB>(z, c_ij.addends(j), a_band, b_lj);
    // band j of C_ij^(l) -> this rank's rows of band j of C_ilj along z, started
    started.push_back(start_reduce_scatter_c_along_z<Steps>(mesh, c_ij.addends_sent(j), c_ij.sums(j)));
    if constexpr (!launches_kernels<axis_type>)
      for (auto& earlier : started) earlier.test();
  }
  for (auto& reduction : started) reduction.wait();
  c_ij.put_in_place(z);
}

}  // namespace shardwise::detail
