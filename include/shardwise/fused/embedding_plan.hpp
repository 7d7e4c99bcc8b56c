#pragma once
// Who computes what in the fused embedding-bag + all-to-all (Punniyamurthy et al.), as numbers only
// (no data): shared by the operator (fused/embedding_all_to_all.hpp) and its cost model
// (fused/embedding_cost.hpp).
//
// Tables are split table-wise over P ranks (rank r owns tables [T·r/P, T·(r+1)/P), which need not be
// equal); the global batch is split for data parallelism (rank d gets rows [B·d/P, B·(d+1)/P)). Rank r
// pools, for each of its tables, every row of the global batch, and row b of table t belongs in
// output row b − B·d/P, columns [t·D, (t+1)·D) of the rank d that owns row b: output {local batch,
// tables × dimension}.
//
// A slice is up to `slice_rows` consecutive rows of one table bound for one destination; it is
// computed by logical workgroup tasks of one row (one bag) each, as in the paper, and sent, with its
// ready flag, once its last task is done (sim/done_bitmask.hpp). Flags
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
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
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
  int dimension = 0;              // D, floats per embedding row
  std::int64_t global_batch = 0;  // B
};

struct embedding_slice {
  int table = 0;             // global table index
  int destination = 0;       // the rank whose output holds it
  std::int64_t first_row = 0;  // in the global batch
  std::int64_t rows = 0;
  std::size_t flag = 0;      // its ready flag at the destination
};

class embedding_plan {
 public:
  embedding_plan(embedding_shape shape, int ranks, std::int64_t slice_rows, slice_order order, int rank_for_errors = -1)
      : shape_(shape), ranks_(ranks), slice_rows_(slice_rows), order_(order) {
    if (shape.tables < 1 || shape.dimension < 1 || shape.global_batch < 1 || ranks < 1 || slice_rows < 1)
      throw argument_error(rank_for_errors, "embedding_plan",
                           "needs positive tables, dimension, batch, ranks and slice rows; got " +
                               std::to_string(shape.tables) + " tables of dimension " + std::to_string(shape.dimension) +
                               ", batch " + std::to_string(shape.global_batch) + ", " + std::to_string(ranks) +
                               " ranks, slices of " + std::to_string(slice_rows) + " rows");
    if (order == slice_order::automatic)
      throw argument_error(rank_for_errors, "embedding_plan",
                           "needs a slice order; automatic is the operator's to resolve (embedding_all_to_all)");
  }

  [[nodiscard]] const embedding_shape& shape() const noexcept { return shape_; }
  [[nodiscard]] int ranks() const noexcept { return ranks_; }
  [[nodiscard]] std::int64_t slice_rows() const noexcept { return slice_rows_; }
  [[nodiscard]] slice_order order() const noexcept { return order_; }
  // Floats in one output row: every table's embedding side by side.
  [[nodiscard]] std::int64_t row_width() const noexcept {
    return static_cast<std::int64_t>(shape_.tables) * shape_.dimension;
  }

  [[nodiscard]] int first_table(int rank) const noexcept {
    return static_cast<int>(static_cast<std::int64_t>(shape_.tables) * rank / ranks_);
  }
  [[nodiscard]] int tables_of(int rank) const noexcept { return first_table(rank + 1) - first_table(rank); }
  // The rank that owns `table`.
  [[nodiscard]] int owner_of(int table) const noexcept {
    int rank = 0;
    while (first_table(rank + 1) <= table) ++rank;
    return rank;
  }
  [[nodiscard]] std::int64_t first_row(int rank) const noexcept { return shape_.global_batch * rank / ranks_; }
  [[nodiscard]] std::int64_t rows_of(int rank) const noexcept { return first_row(rank + 1) - first_row(rank); }
  // Floats `source`'s tables pool for `destination`'s rows: one block of the baseline's all-to-all.
  [[nodiscard]] std::int64_t block_floats(int source, int destination) const noexcept {
    return rows_of(destination) * tables_of(source) * shape_.dimension;
  }
  // Floats in `rank`'s output: its rows of the global batch, every table side by side.
  [[nodiscard]] std::int64_t output_floats(int rank) const noexcept { return rows_of(rank) * row_width(); }
  [[nodiscard]] std::int64_t slices_to(int destination) const noexcept {
    return (rows_of(destination) + slice_rows_ - 1) / slice_rows_;
  }
  // Flags at `destination`: the open flag and one per incoming slice.
  [[nodiscard]] std::size_t flags_at(int destination) const noexcept {
    return 1 + static_cast<std::size_t>(shape_.tables * slices_to(destination));
  }
  // Where row `row` of table `table` lands in its destination's output (in floats).
  [[nodiscard]] std::int64_t output_offset(int destination, int table, std::int64_t row) const noexcept {
    return (row - first_row(destination)) * row_width() + static_cast<std::int64_t>(table) * shape_.dimension;
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

 private:
  embedding_shape shape_;
  int ranks_;
  std::int64_t slice_rows_;
  slice_order order_;
};

}  // namespace shardwise::fused
