#pragma once
// The four steps of the 3-D paper's product (Bian et al., Algorithm 1) on this rank's stored blocks, and
// the plain product made of them. ops/matmul_3d.hpp matches layouts to forms and calls it;
// ops/matmul_3d_in_bands.hpp builds the pipelined product from the same steps.
//
// Algorithm 1 takes the directions of A, B and C as parameters (y, x, z in the paper), and the backward
// forms are the same steps with operands and directions permuted (Algorithm 2: dA = dC·Bᵀ "in z, x, y").
// Here A is the left operand and y the mesh axis it is gathered along, B the right operand and x its
// axis, C the result and z its axis. On rank (i, j, l):
//
//   step                        holds before                    holds after
//   1 gather_a_along_y          A_ijl: its rows cut over y       A_il: the pieces of y's ranks one above the other
//   2 gather_b_along_x          B_lji: cut over x                B_lj: the pieces of x's ranks side by side
//                                                                (columns cut over x) or one above the other
//   3 local_product             A_il, B_lj                       C_ij^(l) = op(A_il)·op(B_lj), an addend of C_ij
//   4 reduce_scatter_c_along_z  C_ij^(l): z's destinations'     C_ilj = Σ_l C_ij^(l), the rows (or columns)
//                               blocks one after the other       of C_ij that rank l along z holds
//
// Blocks are multiplied as stored, padding (zero) included; every rank's stored blocks of one tensor
// have the same extents here (ops/matmul_3d.hpp makes sure), so the pieces of one gather are alike.
#include <Eigen/Core>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

#include "shardwise/layout/layout.hpp"
#include "shardwise/ops/local_product.hpp"

namespace shardwise::detail {

// How one 3-D form moves data: the mesh axes A is gathered along (y), B (x), and C reduce-scattered
// along (z); whether the pieces of B, and of C, cut its columns (they lie side by side) or its rows (one
// above the other). A's pieces always cut its rows.
struct cube_steps {
  std::size_t y;
  std::size_t x;
  std::size_t z;
  bool b_side_by_side;
  bool c_side_by_side;
};

// `count` row-major blocks of rows x cols, one after the other in memory, that lie side by side in one
// matrix of rows x (count · cols); count 1 is simply a matrix.
template <class T>
struct side_by_side_blocks {
  T* data;
  std::int64_t rows;
  std::int64_t cols;
  std::int64_t count;

  // Tile (r, c) when the matrix's rows are cut into row_parts and its columns into col_parts equal parts;
  // col_parts is 1 or count when count > 1, so a tile never straddles two blocks.
  [[nodiscard]] strided_map<T> tile(std::int64_t r, std::int64_t row_parts, std::int64_t c,
                                    std::int64_t col_parts) const {
    const std::int64_t height = rows / row_parts;
    const std::int64_t width = count > 1 ? cols : cols / col_parts;
    const std::int64_t block = count > 1 ? c : 0;
    const std::int64_t first_col = count > 1 ? 0 : c * width;
    return {data + block * rows * cols + r * height * cols + first_col, height, width, Eigen::OuterStride<>(cols)};
  }
};

// The stored tile whose op() is tile (i, j) of op(m), op a transpose or not.
template <bool Transposed, class T>
[[nodiscard]] strided_map<T> tile_of_op(const side_by_side_blocks<T>& m, std::int64_t i, std::int64_t i_parts,
                                        std::int64_t j, std::int64_t j_parts) {
  return Transposed ? m.tile(j, j_parts, i, i_parts) : m.tile(i, i_parts, j, j_parts);
}

// The rows and columns of op(m).
template <bool Transposed, class T>
[[nodiscard]] std::int64_t rows_of_op(const side_by_side_blocks<T>& m) {
  return Transposed ? m.cols * m.count : m.rows;
}
template <bool Transposed, class T>
[[nodiscard]] std::int64_t cols_of_op(const side_by_side_blocks<T>& m) {
  return rows_of_op<!Transposed>(m);
}

// Starts all-gathering `piece` over `axis` into `room`: where the pieces land (side by side, or one above
// the other in rank order), and the request to wait for before reading them.
template <class T, class Communicator>
[[nodiscard]] auto start_all_gather(Communicator& axis, const side_by_side_blocks<const T>& piece, bool side_by_side,
                                    std::span<T> room) {
  const std::int64_t parts = axis.size();
  const side_by_side_blocks<const T> gathered =
      side_by_side ? side_by_side_blocks<const T>{room.data(), piece.rows, piece.cols, parts}
                   : side_by_side_blocks<const T>{room.data(), piece.rows * parts, piece.cols, 1};
  const auto size = static_cast<std::size_t>(piece.rows * piece.cols);
  return std::pair{gathered, axis.iall_gather(std::span<const T>(piece.data, size),
                                              room.first(size * static_cast<std::size_t>(parts)))};
}

// Step 1: A_il, started. `a_ijl` is this rank's piece (its whole block, or a band of it).
template <cube_steps Steps, class T, class Mesh>
[[nodiscard]] auto gather_a_along_y(Mesh& mesh, const side_by_side_blocks<const T>& a_ijl, std::span<T> room) {
  return start_all_gather(mesh.axis(static_cast<int>(Steps.y)), a_ijl, false, room);
}

// Step 2: B_lj, started, into the products' buffer for the right operand.
template <cube_steps Steps, class T, class Mesh>
[[nodiscard]] auto gather_b_along_x(Mesh& mesh, std::span<const T> b_lji, const block_info& b_block) {
  auto& x = mesh.axis(static_cast<int>(Steps.x));
  return start_all_gather(x, side_by_side_blocks<const T>{b_lji.data(), b_block.stored_rows, b_block.stored_cols, 1},
                          Steps.b_side_by_side,
                          workspace<T>(buffer::right, b_lji.size() * static_cast<std::size_t>(x.size())));
}

// Where C_ij^(l) (or some of its rows) is computed: z's destinations' blocks one after the other, so that
// each destination's part is contiguous for the reduce-scatter.
template <cube_steps Steps, class T, class Mesh>
[[nodiscard]] side_by_side_blocks<T> addends_of_c(Mesh& mesh, T* data, std::int64_t rows, std::int64_t cols) {
  const std::int64_t destinations = Steps.c_side_by_side ? mesh.axis(static_cast<int>(Steps.z)).size() : 1;
  return {data, rows, cols / destinations, destinations};
}

// Step 3: c = op(a)·op(b), one GEMM per tile. The inner dimension is cut into tiles by Bᵀ's pieces when
// they lie side by side, the columns by B's pieces or by C's destinations when those do (never both).
// `carrier` is z, which sends the result on (local_product.hpp).
template <bool TransposeA, bool TransposeB, class Carrier, class T>
void local_product(Carrier& carrier, const side_by_side_blocks<T>& c, const side_by_side_blocks<const T>& a,
                   const side_by_side_blocks<const T>& b) {
  const std::int64_t k_tiles = TransposeB ? b.count : 1;
  const std::int64_t n_tiles = (TransposeB ? 1 : b.count) * c.count;
  for (std::int64_t in = 0; in < n_tiles; ++in)
    for (std::int64_t ik = 0; ik < k_tiles; ++ik)
      multiply<TransposeA, TransposeB>(carrier, c.tile(0, 1, in, n_tiles), tile_of_op<TransposeA>(a, 0, 1, ik, k_tiles),
                                       tile_of_op<TransposeB>(b, ik, k_tiles, in, n_tiles), ik > 0);
}

// Step 4: this rank's block of Σ_l C_ij^(l), from `addends` (every destination's part, one after the other).
template <cube_steps Steps, class T, class Mesh>
void reduce_scatter_c_along_z(Mesh& mesh, std::span<const T> addends, std::span<T> c_ilj) {
  mesh.axis(static_cast<int>(Steps.z)).reduce_scatter(addends, c_ilj);
}
// Step 4, started: the request to wait for before reading c_ilj.
template <cube_steps Steps, class T, class Mesh>
[[nodiscard]] auto start_reduce_scatter_c_along_z(Mesh& mesh, std::span<const T> addends, std::span<T> c_ilj) {
  return mesh.axis(static_cast<int>(Steps.z)).ireduce_scatter(addends, c_ilj);
}

// The plain 3-D product: the four steps, both gathers in flight at once. `c` is this rank's stored block
// of the result.
template <cube_steps Steps, bool TransposeA, bool TransposeB, class T, class Mesh>
void cube_multiply(Mesh& mesh, std::span<const T> a, const block_info& a_block, std::span<const T> b,
                   const block_info& b_block, std::span<T> c) {
  static_assert(!(Steps.b_side_by_side && !TransposeB && Steps.c_side_by_side),
                "shardwise: B and C cut the columns of a 3-D product differently");
  const auto gathered_a_size = a.size() * static_cast<std::size_t>(mesh.axis(static_cast<int>(Steps.y)).size());
  // B_lji -> B_lj along x
  auto [b_lj, b_arrival] = gather_b_along_x<Steps>(mesh, b, b_block);
  // A_ijl -> A_il along y
  auto [a_il, a_arrival] =
      gather_a_along_y<Steps>(mesh, side_by_side_blocks<const T>{a.data(), a_block.stored_rows, a_block.stored_cols, 1},
                              workspace<T>(buffer::left, gathered_a_size));
  b_arrival.wait();
  a_arrival.wait();
  // C_ij^(l) = op(A_il)·op(B_lj), on every l
  const std::int64_t rows = rows_of_op<TransposeA>(a_il);
  const std::int64_t cols = cols_of_op<TransposeB>(b_lj);
  const std::span<T> addends = workspace<T>(buffer::product, static_cast<std::size_t>(rows * cols));
  local_product<TransposeA, TransposeB>(mesh.axis(static_cast<int>(Steps.z)),
                                        addends_of_c<Steps>(mesh, addends.data(), rows, cols), a_il, b_lj);
  // C_ij^(l) -> C_ilj along z
  reduce_scatter_c_along_z<Steps>(mesh, std::span<const T>(addends), c);
}

}  // namespace shardwise::detail
