#pragma once
// Who computes what in the fused embedding-bag + all-to-all (Punniyamurthy et al.), forward and
// backward, as numbers only (no data): shared by the operator (fused/embedding_all_to_all.hpp) and its
// cost model (fused/embedding_cost.hpp).
//
// Tables are split table-wise over P ranks (rank r owns tables [T·r/P, T·(r+1)/P), which need not be
// equal, or the runs `owners` gives); the global batch is split for data parallelism (rank d gets rows
// [B·d/P, B·(d+1)/P)). Rank r pools, for each of its tables, every row of the global batch, and row b
// of table t belongs in output row b − B·d/P, columns [column_of(t), column_of(t) + D_t) of the rank d
// that owns row b: output {local batch, every table's width side by side}. Tables may differ in width
// (`dimensions`).
//
// A slice is up to `slice_rows` consecutive rows of one table bound for one destination; it is
// computed by logical workgroup tasks of one row (one bag) each, as in the paper, and sent, with its
// ready flag, once its last task is done (comm/shared/done_bitmask.hpp). Flags
// at destination d: flag 0 says d's output may be written for this call; slice k of table t raises
// flag 1 + t·slices_to(d) + k.
//
// Order of a rank's slices. communication_aware: every table's slices for other ranks first, then
// every table's own slices; table by table within each part (destinations r+1, r+2, … round the ring
// for each table, so the ranks do not all start on the same peer), so a table's rows are looked up
// while they are in cache (on a CPU, pooling destination by destination, through every table for
// each, made the fused path up to 1.5x slower than the baseline's kernel per table). table_by_table:
// each table's slices for other ranks, then its own, before the next table: where slices are stored
// in place (threads) there is no transfer to start early, and coming back to every table for its own
// slices read it from memory again. oblivious, the paper's comparison: destinations 0, 1, …, P−1, i.e. rows
// in batch order, every table for each. automatic: the operator picks by backend
// (fused/embedding_all_to_all.hpp).
//
// Backward, the way back: rank d holds the gradient of its output rows, and each table's owner o needs
// the rows of every rank for its tables. Rank d sends the slices of its rows for the other owners'
// tables first, round the ring (owners d+1, d+2, …: gradient_slices(d)), each to owner o's buffer
// {o's tables, global batch, D_t} at gradient_offset(o, t, row), with flag
// 1 + (t − first_table(o))·backward_slices() + first_slice(d) + k. Owner o then adds the rows into its
// tables' gradients source by source in gradient_source(o, 0), gradient_source(o, 1), …: its own rows
// (no transfer), then those of o − 1, o − 2, … (the order they arrive in, since rank o − 1 sends to o
// first); in the table_by_table order, table after table, each table's sources in that order, which
// keeps a table's gradient in cache where nothing is in flight to wait for. Every path adds each
// table's rows in this one order, so their gradients are the same bits.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardwise/core/error.hpp"

namespace shardwise::fused {

enum class slice_order { automatic, communication_aware, table_by_table, oblivious };

[[nodiscard]] constexpr std::string_view name_of(slice_order order) noexcept {
  constexpr std::string_view names[] = {"automatic", "communication-aware", "table by table", "oblivious"};
  return names[static_cast<int>(order)];
}

struct embedding_shape {
  int tables = 0;                 // over all ranks
  int dimension = 0;              // D, elements per embedding row: every table's, unless `dimensions` says
  std::int64_t global_batch = 0;  // B
  std::vector<int> dimensions{};  // each table's width where they differ (empty: all `dimension`)
  std::vector<int> owners{};      // each table's rank, non-decreasing (empty: the even cut T·r/P)
};

struct embedding_slice {
  int table = 0;               // global table index
  int destination = 0;         // the rank whose output holds it
  std::int64_t first_row = 0;  // in the global batch
  std::int64_t rows = 0;
  std::size_t flag = 0;  // its ready flag at the destination
};

class embedding_plan {
 public:
  embedding_plan(embedding_shape shape, int ranks, std::int64_t slice_rows, slice_order order, int rank_for_errors = -1)
      : shape_(std::move(shape)), ranks_(ranks), slice_rows_(slice_rows), order_(order) {
    const auto fail = [&](const std::string& what) { throw argument_error(rank_for_errors, "embedding_plan", what); };
    if (shape_.tables < 1 || shape_.dimension < 1 || shape_.global_batch < 1 || ranks < 1 || slice_rows < 1)
      fail("needs positive tables, dimension, batch, ranks and slice rows; got " + std::to_string(shape_.tables) +
           " tables of dimension " + std::to_string(shape_.dimension) + ", batch " +
           std::to_string(shape_.global_batch) + ", " + std::to_string(ranks) + " ranks, slices of " +
           std::to_string(slice_rows) + " rows");
    if (order == slice_order::automatic)
      fail("needs a slice order; automatic is the operator's to resolve (embedding_all_to_all)");
    const auto T = static_cast<std::size_t>(shape_.tables);
    if (!shape_.dimensions.empty() &&
        (shape_.dimensions.size() != T || *std::min_element(shape_.dimensions.begin(), shape_.dimensions.end()) < 1))
      fail("needs a positive width for each of the " + std::to_string(T) + " tables; got " +
           std::to_string(shape_.dimensions.size()) + " widths");
    if (!shape_.owners.empty() &&
        (shape_.owners.size() != T || !std::is_sorted(shape_.owners.begin(), shape_.owners.end()) ||
         shape_.owners.front() < 0 || shape_.owners.back() >= ranks))
      fail("needs an owner for each of the " + std::to_string(T) + " tables, non-decreasing ranks below " +
           std::to_string(ranks) + "; got " + std::to_string(shape_.owners.size()) + " owners");
    columns_.push_back(0);
    for (int t = 0; t < shape_.tables; ++t) columns_.push_back(columns_.back() + dimension_of(t));
    for (int r = 0; r <= ranks; ++r)
      first_tables_.push_back(shape_.owners.empty()
                                  ? static_cast<int>(static_cast<std::int64_t>(shape_.tables) * r / ranks)
                                  : static_cast<int>(std::lower_bound(shape_.owners.begin(), shape_.owners.end(), r) -
                                                     shape_.owners.begin()));
    first_slices_.push_back(0);
    for (int r = 0; r < ranks; ++r) first_slices_.push_back(first_slices_.back() + slices_to(r));
  }

  [[nodiscard]] const embedding_shape& shape() const noexcept { return shape_; }
  [[nodiscard]] int ranks() const noexcept { return ranks_; }
  [[nodiscard]] std::int64_t slice_rows() const noexcept { return slice_rows_; }
  [[nodiscard]] slice_order order() const noexcept { return order_; }
  [[nodiscard]] int dimension_of(int table) const {
    return shape_.dimensions.empty() ? shape_.dimension : shape_.dimensions[static_cast<std::size_t>(table)];
  }
  // Where table `table`'s columns begin in an output row.
  [[nodiscard]] std::int64_t column_of(int table) const { return columns_[static_cast<std::size_t>(table)]; }
  // Elements in one output row: every table's embedding side by side.
  [[nodiscard]] std::int64_t row_width() const noexcept { return columns_.back(); }

  [[nodiscard]] int first_table(int rank) const { return first_tables_[static_cast<std::size_t>(rank)]; }
  [[nodiscard]] int tables_of(int rank) const { return first_table(rank + 1) - first_table(rank); }
  // The rank that owns `table`.
  [[nodiscard]] int owner_of(int table) const {
    return static_cast<int>(std::upper_bound(first_tables_.begin(), first_tables_.end(), table) -
                            first_tables_.begin()) -
           1;
  }
  // The width of `rank`'s tables side by side.
  [[nodiscard]] std::int64_t width_of(int rank) const {
    return column_of(first_table(rank + 1)) - column_of(first_table(rank));
  }
  [[nodiscard]] std::int64_t first_row(int rank) const noexcept { return shape_.global_batch * rank / ranks_; }
  [[nodiscard]] std::int64_t rows_of(int rank) const noexcept { return first_row(rank + 1) - first_row(rank); }
  // Elements `source`'s tables pool for `destination`'s rows: one block of the baseline's all-to-all.
  [[nodiscard]] std::int64_t block_floats(int source, int destination) const {
    return rows_of(destination) * width_of(source);
  }
  // Elements in `rank`'s output: its rows of the global batch, every table side by side.
  [[nodiscard]] std::int64_t output_floats(int rank) const noexcept { return rows_of(rank) * row_width(); }
  [[nodiscard]] std::int64_t slices_to(int destination) const noexcept {
    return (rows_of(destination) + slice_rows_ - 1) / slice_rows_;
  }
  // Flags at `destination`: the open flag and one per incoming slice.
  [[nodiscard]] std::size_t flags_at(int destination) const noexcept {
    return 1 + static_cast<std::size_t>(shape_.tables * slices_to(destination));
  }
  // Where row `row` of table `table` lands in its destination's output.
  [[nodiscard]] std::int64_t output_offset(int destination, int table, std::int64_t row) const {
    return (row - first_row(destination)) * row_width() + column_of(table);
  }

  // `rank`'s slices in the order it computes them (see the top of this file).
  [[nodiscard]] std::vector<embedding_slice> slices(int rank) const {
    std::vector<embedding_slice> all;
    auto add = [&](int table, int destination) {
      for (std::int64_t k = 0; k < slices_to(destination); ++k) {
        const std::int64_t begin = first_row(destination) + k * slice_rows_;
        all.push_back({table, destination, begin, std::min(slice_rows_, first_row(destination + 1) - begin),
                       1 + static_cast<std::size_t>(table * slices_to(destination) + k)});
      }
    };
    const int first = first_table(rank), end = first_table(rank + 1);
    if (order_ == slice_order::oblivious) {
      for (int d = 0; d < ranks_; ++d)
        for (int t = first; t < end; ++t) add(t, d);
      return all;
    }
    const bool own_after_each_table = order_ == slice_order::table_by_table;
    for (int t = first; t < end; ++t) {
      for (int step = 1; step < ranks_; ++step) add(t, (rank + step) % ranks_);
      if (own_after_each_table) add(t, rank);
    }
    if (!own_after_each_table)
      for (int t = first; t < end; ++t) add(t, rank);
    return all;
  }

  // Tasks of each of `rank`'s slices in its order (one per row): the shape of its done-bitmask.
  [[nodiscard]] std::vector<std::int64_t> tasks_per_slice(int rank) const {
    std::vector<std::int64_t> tasks;
    for (const auto& slice : slices(rank)) tasks.push_back(slice.rows);
    return tasks;
  }

  // Calls task(slice_index, slice, task_index, row) for each logical workgroup task of `rank`, in its
  // order: task i of a slice pools its row first_row + i. One row per task: with more, the first
  // slices could only be sent once a workgroup had pooled several bags alone (at 1/1040 of the GPU).
  template <class Task>
  void for_each_task(int rank, Task&& task) const {
    const auto all = slices(rank);
    for (std::size_t s = 0; s < all.size(); ++s)
      for (std::int64_t i = 0; i < all[s].rows; ++i) task(s, all[s], i, all[s].first_row + i);
  }

  // ---- backward

  // Slices of each table from all sources together: the flags of one table at its owner.
  [[nodiscard]] std::int64_t backward_slices() const noexcept { return first_slices_.back(); }
  // Flags at `owner` in the backward: the open flag and one per incoming slice.
  [[nodiscard]] std::size_t backward_flags_at(int owner) const {
    return 1 + static_cast<std::size_t>(tables_of(owner) * backward_slices());
  }
  // Elements of `owner`'s gradient buffer: every row of the global batch for each of its tables.
  [[nodiscard]] std::int64_t gradient_floats(int owner) const { return shape_.global_batch * width_of(owner); }
  // Where the gradient of row `row` of table `table` lands in its owner's buffer.
  [[nodiscard]] std::int64_t gradient_offset(int table, std::int64_t row) const {
    return shape_.global_batch * (column_of(table) - column_of(first_table(owner_of(table)))) +
           row * dimension_of(table);
  }
  // The k-th source whose rows `owner` adds into its tables: itself, then owner − 1, owner − 2, ….
  [[nodiscard]] int gradient_source(int owner, int k) const noexcept {
    return ((owner - k) % ranks_ + ranks_) % ranks_;
  }
  // Slice k of `source`'s rows for `table`: its rows and its flag at the table's owner.
  [[nodiscard]] embedding_slice gradient_slice(int table, int source, std::int64_t k) const {
    const int owner = owner_of(table);
    const std::int64_t begin = first_row(source) + k * slice_rows_;
    return {table, owner, begin, std::min(slice_rows_, first_row(source + 1) - begin),
            1 + static_cast<std::size_t>((table - first_table(owner)) * backward_slices() +
                                         first_slices_[static_cast<std::size_t>(source)] + k)};
  }
  // The slices of `source`'s rows it sends, in its order: every table of owner source + 1, then of
  // source + 2, …, round the ring (its own tables' rows stay).
  [[nodiscard]] std::vector<embedding_slice> gradient_slices(int source) const {
    std::vector<embedding_slice> all;
    for (int step = 1; step < ranks_; ++step) {
      const int owner = (source + step) % ranks_;
      for (int t = first_table(owner); t < first_table(owner + 1); ++t)
        for (std::int64_t k = 0; k < slices_to(source); ++k) all.push_back(gradient_slice(t, source, k));
    }
    return all;
  }
  // Calls add(source, slice) for each slice of rows whose gradients `owner` adds into its tables, in
  // its order: the sources as gradient_source gives them, each one's rows table by table, slice by
  // slice; in the table_by_table order, table after table, each one's sources in that order (the
  // tables' gradients stay in cache). Either way each table's rows come in the same order; a slice's
  // rows are added first_row to first_row + rows - 1.
  template <class Add>
  void for_each_gradient_slice(int owner, Add&& add) const {
    const auto rows_of = [&](int t, int source) {
      for (std::int64_t s = 0; s < slices_to(source); ++s) add(source, gradient_slice(t, source, s));
    };
    if (order_ == slice_order::table_by_table) {
      for (int t = first_table(owner); t < first_table(owner + 1); ++t)
        for (int k = 0; k < ranks_; ++k) rows_of(t, gradient_source(owner, k));
      return;
    }
    for (int k = 0; k < ranks_; ++k)
      for (int t = first_table(owner); t < first_table(owner + 1); ++t) rows_of(t, gradient_source(owner, k));
  }

 private:
  embedding_shape shape_;
  int ranks_;
  std::int64_t slice_rows_;
  slice_order order_;
  std::vector<std::int64_t> columns_;       // per table and one past the last: where its columns begin
  std::vector<int> first_tables_;           // per rank and one past the last
  std::vector<std::int64_t> first_slices_;  // per rank and one past the last: its rows' first slice of a table
};

}  // namespace shardwise::fused
