// Example 02: a layout of your own.
//
// A layout says which part of a global matrix each rank holds. The built-in ones (replicated, row_1d,
// col_1d, block_2d, cube_3d, vector_3d, block_cyclic_2d; see docs/layouts.md) cover the usual cases;
// here we write a new one in a few dozen lines, check it with check_layout (and watch it catch a
// broken one), and use it with scatter, redistribute and gather exactly like a built-in layout. The
// products (matmul) take only layouts of the split<...> form: redistribute a tensor of your own
// layout into one first (docs/layouts.md).
//
// The layout: skewed tiles (Cannon's algorithm starts from it). Cut the matrix into P x P tiles; rank r
// holds tile (I, (I + r) mod P) of every tile row I, so every rank holds one tile of each tile row and
// one of each tile column.
//
//   cmake --build build --target 02_custom_layout && build/examples/02_custom_layout
//                                                    4 ranks as threads of one process
//   mpiexec -n 8 build/examples/02_custom_layout_mpi
//                                                    the same source on 8 MPI processes (--oversubscribe
//                                                    if needed)
#include <Eigen/Core>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <stdexcept>

#include "launch.hpp"
#include "shardwise/comm/communicator.hpp"
#include "shardwise/core/error.hpp"
#include "shardwise/layout/check_layout.hpp"
#include "shardwise/layout/layout.hpp"
#include "shardwise/layout/padding.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/tensor/distribute.hpp"
#include "shardwise/tensor/dtensor.hpp"

// 1. The layout: a policy type with a nested mapping<D>, D the mesh's dimensions (like std::mdspan's
//    layout policies). The mapping is built from the global shape and the grid, and answers the
//    questions of the `layout` concept (layout/layout.hpp): how many blocks a rank holds, where each
//    lies, and who owns an element. Tiles are cut with the `ragged` rule, so any shape works.
struct skewed {
  template <std::size_t D>
  class mapping {
    static_assert(D == 1, "skewed: the skewed layout lives on a 1-D mesh");

   public:
    static constexpr bool is_replicated = false;  // every element on one rank
    static constexpr bool is_balanced = false;    // ragged tiles differ by a row or a column

    mapping(shardwise::matrix_extents extents, shardwise::coordinates<1> grid) : extents_(extents), p_(grid[0]) {}

    [[nodiscard]] shardwise::matrix_extents extents() const { return extents_; }
    [[nodiscard]] int ranks() const { return p_; }
    [[nodiscard]] int replicas() const { return 1; }
    [[nodiscard]] int block_count(int) const { return p_; }  // one tile per tile row

    // Rank r's b-th block: tile (b, (b + r) mod P).
    [[nodiscard]] shardwise::block_info block(int rank, int b) const {
      const shardwise::piece rows = shardwise::ragged::cut(extents_.rows, p_, b);
      const shardwise::piece cols = shardwise::ragged::cut(extents_.cols, p_, (b + rank) % p_);
      return {rows.offset, cols.offset, rows.extent, cols.extent, rows.stored, cols.stored};
    }

    // Element (i, j) is in tile (I, J); the rank with (I + r) mod P == J holds it, as its block I.
    [[nodiscard]] shardwise::location owner(std::int64_t i, std::int64_t j) const {
      const shardwise::piece_index row = shardwise::ragged::find(extents_.rows, p_, i);
      const shardwise::piece_index col = shardwise::ragged::find(extents_.cols, p_, j);
      return {static_cast<int>((col.piece - row.piece + p_) % p_), static_cast<int>(row.piece), row.local, col.local};
    }

   private:
    shardwise::matrix_extents extents_;
    int p_;
  };
};

// 2. The compiler checks the interface, before any rank runs.
static_assert(shardwise::layout<skewed, 1>, "skewed must model shardwise::layout on 1-D meshes");

// 3. What the compiler cannot check is the contract: every element held by exactly one rank (or by
//    replicas() ranks, for a replicated layout), blocks inside the matrix, owner() agreeing with the
//    blocks. shardwise::check_layout checks it, reasoning over blocks rather than elements, and names
//    the first breach it finds. Here is the same layout with a typo: tile (b, b * r) instead of
//    (b, b + r), so rank 0 holds tile (b, 0) of every row of tiles, and so do others.
struct skewed_with_a_typo {
  template <std::size_t D>
  class mapping : public skewed::mapping<D> {
   public:
    using skewed::mapping<D>::mapping;
    [[nodiscard]] shardwise::block_info block(int rank, int b) const {
      const int p = this->ranks();
      const shardwise::piece rows = shardwise::ragged::cut(this->extents().rows, p, b);
      const shardwise::piece cols = shardwise::ragged::cut(this->extents().cols, p, (b * rank) % p);
      return {rows.offset, cols.offset, rows.extent, cols.extent, rows.stored, cols.stored};
    }
  };
};

int main(int argc, char** argv) {
  using matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

  auto body = [](shardwise::communicator auto& world) {
    shardwise::process_mesh mesh(world, {world.size()});

    // 4. Check the layout on this shape and grid: silent when it keeps the contract. A dtensor checks
    //    its layout by itself in builds without NDEBUG (once per layout, shape and grid).
    shardwise::check_layout<skewed>({10, 7}, mesh.shape());
    if (world.size() > 1) {  // one rank alone holds every tile whatever the typo
      try {
        shardwise::check_layout<skewed_with_a_typo>({10, 7}, mesh.shape());
        throw std::runtime_error("check_layout accepted the layout with a typo");
      } catch (const shardwise::layout_error& e) {
        if (world.rank() == 0) std::printf("the typo is caught: %s\n", e.what());
      }
    }

    // 5. A 10 x 7 matrix, known to rank 0 only; scatter cuts it into skewed tiles. No rank but 0
    //    ever holds the whole matrix.
    matrix whole;
    if (world.rank() == 0)
      whole = matrix::NullaryExpr(10, 7, [](Eigen::Index i, Eigen::Index j) { return 100.0 * i + j; });
    auto tiles = shardwise::scatter<skewed>(mesh, whole, /*root*/ 0);

    // 6. Each block is an Eigen map over this rank's storage, placed by the layout.
    double local_sum = 0;
    for (int b = 0; b < tiles.block_count(); ++b) local_sum += tiles.local(b).sum();

    // 7. Into a built-in layout and back: redistribute moves only what changes owner.
    auto by_columns = shardwise::redistribute<shardwise::row_1d<shardwise::ragged>>(tiles);
    auto skewed_again = shardwise::redistribute<skewed>(by_columns);

    // 8. Gather to rank 0 and compare with the original, element for element.
    const matrix back = shardwise::gather(skewed_again, 0);
    double sums[1] = {local_sum};
    world.all_reduce(sums, shardwise::op::sum);
    if (world.rank() == 0) {
      if (back != whole) throw std::runtime_error("the matrix did not survive scatter -> redistribute -> gather");
      std::printf(
          "%d ranks: skewed tiles -> row_1d -> skewed tiles -> gathered: the same 10x7 matrix; sum %.0f = %.0f\n",
          world.size(), sums[0], whole.sum());
    }
  };

  // 9. Launch, as in example 01: 4 ranks as threads, or one per MPI process.
  return shardwise::examples::launch(argc, argv, 4, body);
}
