#pragma once
// check_layout: whether a layout mapping keeps the contract of layout/layout.hpp, and if not, what
// breaks it, naming the element, the ranks and the blocks:
//
//   shardwise::check_layout<my_layout>({10, 7}, shardwise::coordinates<1>{4});   // builds the mapping
//   shardwise::check_layout(mapping);                                            // or checks one
//   // [no rank] check_layout: element (3, 5) is held by rank 1 block 0 and rank 2 block 0, and the
//   // layout does not declare replication (a 10x7 matrix on 4 ranks)
//
// It throws layout_error when
//   - replicas() is below 1 or above ranks(), or above 1 while is_replicated is false;
//   - is_balanced is true and a rank stores another number of elements than rank 0;
//   - a block has a negative offset or extent, reaches outside the matrix, stores less than it owns, or
//     a rank's blocks store more elements than fit in 64 bits;
//   - an element lies in no block, in two blocks of one rank, in blocks of different ranks that are
//     not equal (blocks are equal or disjoint), or in a number of blocks other than replicas()
//     (more than one needs is_replicated);
//   - owner(i, j) names a block that does not exist or does not hold (i, j) at the place it says, or
//     not the lowest rank holding (i, j).
// Blocks that own nothing (padding only) take no part in covering the matrix.
//
// It reasons over rectangles, never element by element, so it is as cheap for 10^12 elements as for
// 10: the blocks are sorted, equal ones grouped (a replicated block once), and a sweep down the rows
// keeps the blocks crossing the current row in a map by first column, where an overlap or a gap shows
// as soon as a block starts or ends. O(B log B) for B blocks in all, plus owner() at each distinct
// block's corners and at 64 elements spread over the matrix.
//
// dtensor calls it once per layout, shape and grid (tensor/dtensor.hpp) when SHARDWISE_CHECK_LAYOUTS is
// 1: by default in builds without NDEBUG; define it to 1 or 0 before including shardwise to choose.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "shardwise/core/checked_arithmetic.hpp"
#include "shardwise/core/error.hpp"
#include "shardwise/layout/layout.hpp"
#include "shardwise/mesh/shape.hpp"

#ifndef SHARDWISE_CHECK_LAYOUTS
#ifdef NDEBUG
#define SHARDWISE_CHECK_LAYOUTS 0
#else
#define SHARDWISE_CHECK_LAYOUTS 1
#endif
#endif

namespace shardwise {

namespace detail {

template <layout_mapping M>
class layout_checker {
 public:
  explicit layout_checker(const M& mapping)
      : mapping_(mapping),
        extents_(mapping.extents()),
        ranks_(mapping.ranks()),
        context_(" (a " + extents_string(extents_) + " matrix on " + std::to_string(ranks_) +
                 (ranks_ == 1 ? " rank)" : " ranks)")) {}

  void check() {
    check_counts();
    collect_blocks();
    group_equal_blocks();
    sweep_rows();
    check_owners();
  }

 private:
  // A non-empty block and who holds it.
  struct held {
    block_info block;
    int rank;
    int index;
  };

  [[noreturn]] void fail(const std::string& what) const { throw layout_error(-1, "check_layout", what + context_); }

  static std::string element(std::int64_t i, std::int64_t j) {
    return "element (" + std::to_string(i) + ", " + std::to_string(j) + ")";
  }
  static std::string holder(const held& h) {
    return "rank " + std::to_string(h.rank) + " block " + std::to_string(h.index);
  }

  void check_counts() const {
    if (extents_.rows < 0 || extents_.cols < 0) fail("the extents are negative");
    if (ranks_ < 1) fail("ranks() is " + std::to_string(ranks_));
    const int replicas = mapping_.replicas();
    if (replicas < 1 || replicas > ranks_)
      fail("replicas() is " + std::to_string(replicas) + "; it must lie between 1 and ranks()");
    if (replicas > 1 && !M::is_replicated)
      fail("replicas() is " + std::to_string(replicas) + ", but is_replicated is false");
  }

  // is_balanced is a promise algorithms may rely on (equal counts, no per-rank sizes exchanged), so a
  // rank storing more or less than rank 0 breaks the contract.
  void collect_blocks() {
    std::int64_t first_rank_stores = 0;
    for (int rank = 0; rank < ranks_; ++rank) {
      const int count = mapping_.block_count(rank);
      if (count < 0) fail("rank " + std::to_string(rank) + " has " + std::to_string(count) + " blocks");
      std::int64_t stored = 0;
      for (int b = 0; b < count; ++b) {
        const held h{mapping_.block(rank, b), rank, b};
        check_block(h);
        const std::optional<std::int64_t> total =
            sum_if_fits(stored, *product_if_fits(h.block.stored_rows, h.block.stored_cols));
        if (!total) fail("rank " + std::to_string(rank) + "'s blocks store more elements than fit in 64 bits");
        stored = *total;
        if (h.block.rows > 0 && h.block.cols > 0) blocks_.push_back(h);
      }
      if (rank == 0) first_rank_stores = stored;
      if (M::is_balanced && stored != first_rank_stores)
        fail("is_balanced is true, but rank 0 stores " + std::to_string(first_rank_stores) + " elements and rank " +
             std::to_string(rank) + " stores " + std::to_string(stored));
    }
  }

  void check_block(const held& h) const {
    const block_info& b = h.block;
    const std::string name = holder(h);
    if (b.row_offset < 0 || b.col_offset < 0 || b.rows < 0 || b.cols < 0)
      fail(name + " has a negative offset or extent: at (" + std::to_string(b.row_offset) + ", " +
           std::to_string(b.col_offset) + "), " + extents_string(b.rows, b.cols));
    if (b.stored_rows < b.rows || b.stored_cols < b.cols)
      fail(name + " owns " + extents_string(b.rows, b.cols) + " elements but stores " +
           extents_string(b.stored_rows, b.stored_cols) + "; storage holds at least what is owned");
    const std::optional<std::int64_t> row_end = sum_if_fits(b.row_offset, b.rows);
    const std::optional<std::int64_t> col_end = sum_if_fits(b.col_offset, b.cols);
    if (!row_end || !col_end || *row_end > extents_.rows || *col_end > extents_.cols)
      fail(name + " at (" + std::to_string(b.row_offset) + ", " + std::to_string(b.col_offset) + ") of " +
           extents_string(b.rows, b.cols) + " elements reaches outside the matrix");
    if (!product_if_fits(b.stored_rows, b.stored_cols))
      fail(name + " stores " + extents_string(b.stored_rows, b.stored_cols) + " elements, more than fit in 64 bits");
  }

  static auto rectangle(const block_info& b) { return std::tuple{b.row_offset, b.col_offset, b.rows, b.cols}; }
  static auto key(const held& h) { return std::tuple_cat(rectangle(h.block), std::tuple{h.rank, h.index}); }

  // Sorts the blocks, groups equal ones and checks each group's holders against replicas().
  void group_equal_blocks() {
    std::ranges::sort(blocks_, [](const held& a, const held& b) { return key(a) < key(b); });
    const int replicas = mapping_.replicas();
    for (std::size_t first = 0; first < blocks_.size();) {
      std::size_t end = first + 1;
      while (end < blocks_.size() && rectangle(blocks_[end].block) == rectangle(blocks_[first].block)) ++end;
      distinct_.push_back(blocks_[first]);
      const block_info& b = blocks_[first].block;
      const std::string at = element(b.row_offset, b.col_offset);
      for (std::size_t k = first + 1; k < end; ++k) {
        if (blocks_[k].rank == blocks_[k - 1].rank)
          fail(at + " is held twice by rank " + std::to_string(blocks_[k].rank) + ", in blocks " +
               std::to_string(blocks_[k - 1].index) + " and " + std::to_string(blocks_[k].index) +
               "; blocks of one rank must be disjoint");
      }
      if (end - first > 1 && !M::is_replicated)
        fail(at + " is held by " + holder(blocks_[first]) + " and " + holder(blocks_[first + 1]) +
             ", and the layout does not declare replication");
      if (end - first != static_cast<std::size_t>(replicas)) {
        std::string holders;
        for (std::size_t k = first; k < end; ++k) holders += (k == first ? "" : ", ") + holder(blocks_[k]);
        fail(at + " is held by " + std::to_string(end - first) + (end - first == 1 ? " block (" : " blocks (") +
             holders + "), but replicas() is " + std::to_string(replicas) +
             "; every element lies in replicas() blocks");
      }
      first = end;
    }
  }

  // Down the rows: at each row where a block starts or ends, the distinct blocks crossing that row must
  // be disjoint and together span every column.
  void sweep_rows() {
    if (extents_.rows == 0 || extents_.cols == 0) return;  // no element; every block is empty (checked)
    std::vector<std::int64_t> rows{0};
    for (const held& d : distinct_) {
      rows.push_back(d.block.row_offset);
      if (d.block.row_offset + d.block.rows < extents_.rows) rows.push_back(d.block.row_offset + d.block.rows);
    }
    std::ranges::sort(rows);
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());

    std::map<std::int64_t, std::size_t> crossing;     // first column -> distinct block, for those crossing the row
    std::multimap<std::int64_t, std::size_t> ending;  // row end -> distinct block, for the same blocks
    std::int64_t covered = 0;                         // columns the crossing blocks span together
    std::size_t next = 0;                             // distinct blocks are in order of their first row
    for (const std::int64_t row : rows) {
      while (!ending.empty() && ending.begin()->first <= row) {
        const block_info& b = distinct_[ending.begin()->second].block;
        crossing.erase(b.col_offset);
        covered -= b.cols;
        ending.erase(ending.begin());
      }
      for (; next < distinct_.size() && distinct_[next].block.row_offset == row; ++next) {
        const held& h = distinct_[next];
        const auto after = crossing.lower_bound(h.block.col_offset);
        if (after != crossing.end() && after->first < h.block.col_offset + h.block.cols)
          overlap(row, h, distinct_[after->second]);
        if (after != crossing.begin()) {
          const held& before = distinct_[std::prev(after)->second];
          if (before.block.col_offset + before.block.cols > h.block.col_offset) overlap(row, h, before);
        }
        crossing.emplace(h.block.col_offset, next);
        ending.emplace(h.block.row_offset + h.block.rows, next);
        covered += h.block.cols;
      }
      if (covered < extents_.cols) {
        std::int64_t column = 0;
        for (const auto& [first_column, d] : crossing) {
          if (first_column != column) break;
          column += distinct_[d].block.cols;
        }
        fail(element(row, column) + " is held by no rank");
      }
    }
  }

  // Two distinct blocks that both cross `row` and share columns.
  [[noreturn]] void overlap(std::int64_t row, const held& a, const held& b) const {
    const std::string at = element(row, std::max(a.block.col_offset, b.block.col_offset)) + " is held by " + holder(b) +
                           " (" + owned_ranges(b.block) + ") and " + holder(a) + " (" + owned_ranges(a.block) + ")";
    if (a.rank == b.rank) fail(at + "; blocks of one rank must be disjoint");
    if (!M::is_replicated) fail(at + ", and the layout does not declare replication");
    fail(at + "; blocks of different ranks must be equal or disjoint");
  }

  // owner(i, j) must name an existing block that holds (i, j) where it says, on the lowest rank holding it.
  void check_owner(std::int64_t i, std::int64_t j) const {
    const std::string call = "owner(" + std::to_string(i) + ", " + std::to_string(j) + ")";
    location at;
    try {
      at = mapping_.owner(i, j);
    } catch (const std::exception& e) {
      fail(call + " threw for an element of the matrix: " + e.what());
    }
    const std::string named = "rank " + std::to_string(at.rank) + " block " + std::to_string(at.block);
    if (at.rank < 0 || at.rank >= ranks_ || at.block < 0 || at.block >= mapping_.block_count(at.rank))
      fail(call + " names " + named + ", which does not exist");
    const block_info b = mapping_.block(at.rank, at.block);
    if (i < b.row_offset || i >= b.row_offset + b.rows || j < b.col_offset || j >= b.col_offset + b.cols)
      fail(call + " names " + named + ", which holds " + (b.rows > 0 && b.cols > 0 ? owned_ranges(b) : "nothing"));
    if (at.row != i - b.row_offset || at.col != j - b.col_offset)
      fail(call + " places the element at (" + std::to_string(at.row) + ", " + std::to_string(at.col) + ") of " +
           named + ", which holds it at (" + std::to_string(i - b.row_offset) + ", " +
           std::to_string(j - b.col_offset) + ")");
    // The holders of (i, j) are those of b; distinct_ has the lowest of them, in the order of the blocks.
    const int lowest =
        std::ranges::lower_bound(distinct_, rectangle(b), {}, [](const held& d) { return rectangle(d.block); })->rank;
    if (at.rank != lowest)
      fail(call + " names rank " + std::to_string(at.rank) + ", but the lowest rank holding " + element(i, j) +
           " is rank " + std::to_string(lowest));
  }

  void check_owners() const {
    for (const held& d : distinct_) {
      const block_info& b = d.block;
      const std::int64_t last_row = b.row_offset + b.rows - 1;
      const std::int64_t last_col = b.col_offset + b.cols - 1;
      check_owner(b.row_offset, b.col_offset);
      check_owner(b.row_offset, last_col);
      check_owner(last_row, b.col_offset);
      check_owner(last_row, last_col);
    }
    // Elements spread over the matrix by a fixed sequence, so a failure repeats.
    if (extents_.rows == 0 || extents_.cols == 0) return;
    std::uint64_t state = 0x9E3779B97F4A7C15ULL;
    for (int k = 0; k < 64; ++k) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      const auto i = static_cast<std::int64_t>((state >> 1) % static_cast<std::uint64_t>(extents_.rows));
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      const auto j = static_cast<std::int64_t>((state >> 1) % static_cast<std::uint64_t>(extents_.cols));
      check_owner(i, j);
    }
  }

  const M& mapping_;
  matrix_extents extents_;
  int ranks_;
  std::string context_;
  std::vector<held> blocks_;
  std::vector<held> distinct_;  // the lowest rank's copy of each distinct block, in the order of blocks_
};

template <layout_mapping M>
void check_layout_on(const M& mapping, int grid_ranks) {
  if (mapping.ranks() != grid_ranks)
    throw layout_error(-1, "check_layout",
                       "ranks() is " + std::to_string(mapping.ranks()) + ", but the grid has " +
                           std::to_string(grid_ranks) + " ranks");
  layout_checker<M>(mapping).check();
}

// check_layout for each layout, shape and grid once per process: dtensor's debug check, paid by the
// first tensor of a kind (threads of one process share it).
template <class Layout, std::size_t D>
void check_layout_once(const mapping_t<Layout, D>& mapping, const coordinates<D>& grid) {
  static std::mutex guard;
  static std::set<std::tuple<std::int64_t, std::int64_t, coordinates<D>>> checked;
  const auto key = std::tuple{mapping.extents().rows, mapping.extents().cols, grid};
  {
    const std::lock_guard lock(guard);
    if (checked.contains(key)) return;
  }
  check_layout_on(mapping, grid_size(grid));
  const std::lock_guard lock(guard);
  checked.insert(key);
}

}  // namespace detail

// Throws layout_error, naming the first breach of the layout contract it finds (see the top of this
// file); returns when the mapping keeps it.
template <layout_mapping M>
void check_layout(const M& mapping) {
  detail::layout_checker<M>(mapping).check();
}

// Builds Layout's mapping of `extents` on `grid` (its own errors propagate), then checks it, and that
// it has as many ranks as the grid.
template <class Layout, std::size_t D>
void check_layout(const matrix_extents& extents, const coordinates<D>& grid) {
  static_assert(layout<Layout, D>,
                "shardwise::check_layout: Layout does not model shardwise::layout for a grid of this many dimensions "
                "(a policy with a nested mapping<D>; see layout/layout.hpp)");
  detail::check_layout_on(mapping_t<Layout, D>(extents, grid), grid_size(grid));
}

}  // namespace shardwise
