// Misuse: a product with a layout written against the layout concept alone. This one even names its
// cuts as split<...> does (row_axes, col_axes, padding) — but places the pieces in reverse rank order,
// so a product that read those members would multiply the wrong blocks. The products require the
// split<...> form itself, and must say so (EXPECT in tests/CMakeLists.txt).
#include <array>
#include <cstddef>
#include <cstdint>

#include "shardwise/comm/threads.hpp"
#include "shardwise/layout/layout.hpp"
#include "shardwise/layout/padding.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/ops/matmul.hpp"

// Columns over axis 0 of a 1-D mesh, rank r holding piece P - 1 - r.
struct reversed_columns {
  using padding = shardwise::exact;
  static constexpr std::array<std::size_t, 0> row_axes{};
  static constexpr std::array<std::size_t, 1> col_axes{0};

  template <std::size_t D>
  class mapping {
   public:
    static constexpr bool is_replicated = false;
    static constexpr bool is_balanced = true;
    mapping(shardwise::matrix_extents extents, shardwise::coordinates<D> grid) : extents_(extents), p_(grid[0]) {}
    [[nodiscard]] shardwise::matrix_extents extents() const { return extents_; }
    [[nodiscard]] int ranks() const { return p_; }
    [[nodiscard]] int replicas() const { return 1; }
    [[nodiscard]] int block_count(int) const { return 1; }
    [[nodiscard]] shardwise::block_info block(int rank, int) const {
      const shardwise::piece cols = padding::cut(extents_.cols, p_, p_ - 1 - rank);
      return {0, cols.offset, extents_.rows, cols.extent, extents_.rows, cols.stored};
    }
    [[nodiscard]] shardwise::location owner(std::int64_t i, std::int64_t j) const {
      const shardwise::piece_index col = padding::find(extents_.cols, p_, j);
      return {p_ - 1 - static_cast<int>(col.piece), 0, i, col.local};
    }

   private:
    shardwise::matrix_extents extents_;
    int p_;
  };
};

using mesh_1d = shardwise::process_mesh<shardwise::threads::communicator, 1>;

void misuse(mesh_1d& mesh) {
  const shardwise::dtensor<float, shardwise::replicated<>, mesh_1d> x(mesh, {8, 8});
  const shardwise::dtensor<float, reversed_columns, mesh_1d> w(mesh, {8, 8});
  auto y = shardwise::matmul(x, w);  // replicated · row_1d would be Megatron's column-parallel product
  (void)y;
}
