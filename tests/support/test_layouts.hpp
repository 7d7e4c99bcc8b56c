#pragma once
// Layouts written for tests against the layout concept alone, as a user writes one: a base holding
// what every such mapping keeps (the global shape and the grid's rank count), and test_layout<B>, the
// columns of a matrix cut over the ranks (as row_1d<ragged>) but for one breach B of the layout
// contract, which check_layout must name.
#include <cstddef>
#include <cstdint>

#include "shardwise/layout/layout.hpp"
#include "shardwise/layout/padding.hpp"
#include "shardwise/mesh/shape.hpp"

namespace shardwise::testing {

template <std::size_t D>
class test_mapping_base {
 public:
  test_mapping_base(matrix_extents extents, coordinates<D> grid) : extents_(extents), p_(grid_size(grid)) {}
  [[nodiscard]] matrix_extents extents() const { return extents_; }
  [[nodiscard]] int ranks() const { return p_; }

 protected:
  matrix_extents extents_;
  int p_;
};

// What a test layout gets wrong.
enum class breach {
  none,
  shared_block,       // rank 2 holds rank 1's block instead of its own
  missing_block,      // the last rank holds nothing
  overlap,            // rank 0's block reaches one column into rank 1's
  overlap_in_rank,    // rank 0 holds its block and, as a second block, the same block one column wider
  twice_in_rank,      // rank 0 holds its block twice
  outside,            // the last rank's block reaches one column past the matrix
  stored_too_little,  // rank 0 stores one column less than it owns
  stored_too_much,    // rank 0 stores 2^40 x 2^40 elements, more than 64 bits count
  owner_rank,         // owner() names the next rank
  owner_place,        // owner() puts the element one column further in its block
  replicas,           // declares 2 replicas, holds each element once
  owner_not_lowest,   // replicated on every rank; owner() names the highest
  unbalanced,         // declares is_balanced, though its ragged columns need not split evenly
};

template <breach B>
struct test_layout {
  template <std::size_t D>
  class mapping : public test_mapping_base<D> {
    using test_mapping_base<D>::extents_;
    using test_mapping_base<D>::p_;

   public:
    static constexpr bool is_replicated = B == breach::replicas || B == breach::owner_not_lowest;
    static constexpr bool is_balanced = B == breach::unbalanced;

    using test_mapping_base<D>::test_mapping_base;
    [[nodiscard]] int replicas() const { return B == breach::replicas ? 2 : B == breach::owner_not_lowest ? p_ : 1; }
    [[nodiscard]] int block_count(int rank) const {
      if (B == breach::missing_block && rank == p_ - 1) return 0;
      if ((B == breach::overlap_in_rank || B == breach::twice_in_rank) && rank == 0) return 2;
      return 1;
    }
    [[nodiscard]] block_info block(int rank, int b) const {
      if (B == breach::owner_not_lowest) return {0, 0, extents_.rows, extents_.cols, extents_.rows, extents_.cols};
      const int part = B == breach::shared_block && rank == 2 ? 1 : rank;
      const piece cols = ragged::cut(extents_.cols, p_, part);
      block_info info{0, cols.offset, extents_.rows, cols.extent, extents_.rows, cols.extent};
      const bool widened = (B == breach::overlap && rank == 0) || (B == breach::overlap_in_rank && b == 1) ||
                           (B == breach::outside && rank == p_ - 1);
      if (widened) info.stored_cols = ++info.cols;
      if (B == breach::stored_too_little && rank == 0) --info.stored_cols;
      if (B == breach::stored_too_much && rank == 0) info.stored_rows = info.stored_cols = std::int64_t{1} << 40;
      return info;
    }
    [[nodiscard]] location owner(std::int64_t i, std::int64_t j) const {
      if (B == breach::owner_not_lowest) return {p_ - 1, 0, i, j};
      const piece_index col = ragged::find(extents_.cols, p_, j);
      const int rank = static_cast<int>(col.piece);
      return {B == breach::owner_rank ? (rank + 1) % p_ : rank, 0, i, col.local + (B == breach::owner_place ? 1 : 0)};
    }
  };
};

}  // namespace shardwise::testing
