#pragma once
// sparse_parameter<T>: an embedding table (or one rank's piece of it) that a batch touches in a few
// rows, and its gradient as those rows only (sparse_rows<T>): each touched row once, in the order first
// touched, with the sum of its gradients. A batch that looks a row up several times adds every lookup's
// gradient into that row before any optimizer sees it (the duplicates DLRM's and FBGEMM's sparse
// optimizers accumulate first), and an optimizer that walks touched() never reads or writes the rest
// of the table (optim/sparse_update.hpp).
//
//   sparse_rows<T> g(rows, dimension);
//   Eigen::Map<…>(g.row(17), dimension) += contribution;   // zeros the first time row 17 is touched
//   for (std::size_t k = 0; k < g.touched().size(); ++k) use(g.touched()[k], g.values(k));
//   g.clear();                                              // forgets the touched rows only
//
// A table's values, and the rows of its gradient, are storage of the rank (core/shared_buffer.hpp):
// counted in its memory high-water mark, and in a shapes-only run given no memory, as a dense
// parameter's are. The gradient's rows grow as rows are touched, doubling, and stay for the next batch,
// with the list of the rows touched (8 bytes a row). So is the index of where each table row's sum
// lies (8 bytes a table row, from the first touch). Integers have memory in shapes-only runs too.
#include <Eigen/Core>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

#include "shardwise/core/shared_buffer.hpp"

namespace shardwise::nn {

template <class T>
class sparse_rows {
 public:
  sparse_rows(std::int64_t table_rows, int dimension) : table_rows_(table_rows), dimension_(dimension) {}
  // Moved, never copied: its rows are one buffer, which a copy would share.
  sparse_rows(const sparse_rows&) = delete;
  sparse_rows& operator=(const sparse_rows&) = delete;
  sparse_rows(sparse_rows&&) noexcept = default;
  sparse_rows& operator=(sparse_rows&&) noexcept = default;

  [[nodiscard]] int dimension() const noexcept { return dimension_; }
  [[nodiscard]] std::int64_t table_rows() const noexcept { return table_rows_; }

  // The gradient of table row `index` (dimension() elements), zeros when first touched; valid until
  // the next row is first touched. With shapes only it lies in the range that holds no memory: the row
  // is touched, and nothing should be written there.
  [[nodiscard]] T* row(std::int64_t index) {
    // The slots come with the first touch: a run that never sums a gradient has none. Filled here, as
    // a shapes-only run leaves new buffers as they come.
    if (slots_.size() == 0) {
      slots_ = shared_buffer<std::int64_t>::zeros(static_cast<std::size_t>(table_rows_));
      std::ranges::fill(slots_.span(), untouched);
    }
    auto& slot = slots_.data()[index];
    if (slot == untouched) {
      if (touched_count_ == touched_.size()) grow();
      slot = static_cast<std::int64_t>(touched_count_);
      touched_.data()[touched_count_++] = index;
      if (values_.stored()) std::fill_n(at(static_cast<std::size_t>(slot)), width(), T(0));
    }
    return at(static_cast<std::size_t>(slot));
  }

  // The rows touched since the last clear(), each once, in the order first touched.
  [[nodiscard]] std::span<const std::int64_t> touched() const noexcept { return {touched_.data(), touched_count_}; }
  // The summed gradient of touched()[k].
  [[nodiscard]] std::span<const T> values(std::size_t k) const { return {at(k), width()}; }
  // Whether row `index` has been touched, and its gradient if so (null otherwise).
  [[nodiscard]] const T* find(std::int64_t index) const {
    if (slots_.size() == 0) return nullptr;
    const auto slot = slots_.data()[index];
    return slot == untouched ? nullptr : at(static_cast<std::size_t>(slot));
  }

  // Forgets the touched rows: the cost of the rows touched, not of the table. The rows' memory stays
  // for the next batch, as a framework's allocator keeps it.
  void clear() {
    for (const auto index : touched()) slots_.data()[index] = untouched;
    touched_count_ = 0;
  }

 private:
  static constexpr std::int64_t untouched = -1;
  static constexpr std::size_t least_rows = 16;

  [[nodiscard]] std::size_t width() const noexcept { return static_cast<std::size_t>(dimension_); }
  [[nodiscard]] T* at(std::size_t slot) const noexcept { return values_.data() + slot * width(); }
  // Room for twice the rows (storage of the rank, counted as the tables are), the touched ones and
  // their list copied over.
  void grow() {
    const std::size_t rows = std::max(least_rows, 2 * touched_.size());
    auto larger = shared_buffer<T>::zeros(rows * width());
    if (values_.stored() && larger.stored()) std::copy_n(values_.data(), touched_count_ * width(), larger.data());
    auto longer = shared_buffer<std::int64_t>::zeros(rows);
    std::copy_n(touched_.data(), touched_count_, longer.data());
    values_ = std::move(larger);
    touched_ = std::move(longer);
  }

  std::int64_t table_rows_;
  int dimension_;
  shared_buffer<std::int64_t> slots_;    // per table row: its place in touched_, or untouched
  shared_buffer<std::int64_t> touched_;  // the rows touched, the first touched_count_ in use
  std::size_t touched_count_ = 0;
  shared_buffer<T> values_;  // rows of dimension_, as many as touched_ has room for
};

// One table, or the rows [first_row, first_row + rows) of one where a table is cut by rows over ranks:
// a block of the table_rows x dimension table, as a dense parameter's block is of its global matrix.
// Moved, never copied: its values are one buffer, which a copy would share.
template <class T>
class sparse_parameter {
 public:
  using matrix_type = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

  int table = 0;                // which table of the model
  std::int64_t table_rows = 0;  // of the whole table
  std::int64_t first_row = 0;   // of the table, where this piece begins
  sparse_rows<T> gradient;

  // Rows [first, first + rows) of a table of `whole_rows` rows of `dimension`: zeros.
  sparse_parameter(int table_index, std::int64_t whole_rows, std::int64_t first, std::int64_t rows, int dimension)
      : table(table_index),
        table_rows(whole_rows),
        first_row(first),
        gradient(rows, dimension),
        storage_(shared_buffer<T>::zeros(static_cast<std::size_t>(rows) * static_cast<std::size_t>(dimension))) {}
  sparse_parameter(sparse_parameter&&) noexcept = default;
  sparse_parameter& operator=(sparse_parameter&&) noexcept = default;

  [[nodiscard]] std::int64_t rows() const noexcept { return gradient.table_rows(); }
  [[nodiscard]] int dimension() const noexcept { return gradient.dimension(); }
  // rows × dimension, row-major.
  [[nodiscard]] Eigen::Map<matrix_type> value() noexcept { return {storage_.data(), rows(), dimension()}; }
  [[nodiscard]] Eigen::Map<const matrix_type> value() const noexcept { return {storage_.data(), rows(), dimension()}; }
  [[nodiscard]] std::span<const T> values() const noexcept { return storage_.span(); }
  [[nodiscard]] std::span<T> values() noexcept { return storage_.span(); }
  [[nodiscard]] std::span<T> row(std::int64_t index) noexcept {
    const auto width = static_cast<std::size_t>(dimension());
    return storage_.span().subspan(static_cast<std::size_t>(index) * width, width);
  }

 private:
  shared_buffer<T> storage_;
};

}  // namespace shardwise::nn
