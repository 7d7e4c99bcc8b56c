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
#include <Eigen/Core>

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace shardwise::nn {

template <class T>
class sparse_rows {
 public:
  sparse_rows(std::int64_t table_rows, int dimension)
      : dimension_(dimension), slot_(static_cast<std::size_t>(table_rows), untouched) {}

  [[nodiscard]] int dimension() const noexcept { return dimension_; }
  [[nodiscard]] std::int64_t table_rows() const noexcept { return static_cast<std::int64_t>(slot_.size()); }

  // The gradient of table row `index` (dimension() elements), zeros when first touched; valid until
  // the next row is first touched.
  [[nodiscard]] T* row(std::int64_t index) {
    auto& slot = slot_[static_cast<std::size_t>(index)];
    if (slot == untouched) {
      slot = static_cast<std::int64_t>(touched_.size());
      touched_.push_back(index);
      values_.resize(values_.size() + static_cast<std::size_t>(dimension_), T(0));
    }
    return values_.data() + static_cast<std::size_t>(slot) * static_cast<std::size_t>(dimension_);
  }

  // The rows touched since the last clear(), each once, in the order first touched.
  [[nodiscard]] std::span<const std::int64_t> touched() const noexcept { return touched_; }
  // The summed gradient of touched()[k].
  [[nodiscard]] std::span<const T> values(std::size_t k) const {
    return std::span<const T>(values_).subspan(k * static_cast<std::size_t>(dimension_),
                                               static_cast<std::size_t>(dimension_));
  }
  // Whether row `index` has been touched, and its gradient if so (null otherwise).
  [[nodiscard]] const T* find(std::int64_t index) const {
    const auto slot = slot_[static_cast<std::size_t>(index)];
    return slot == untouched ? nullptr
                             : values_.data() + static_cast<std::size_t>(slot) * static_cast<std::size_t>(dimension_);
  }

  // Forgets the touched rows: the cost of the rows touched, not of the table.
  void clear() {
    for (const auto index : touched_) slot_[static_cast<std::size_t>(index)] = untouched;
    touched_.clear();
    values_.clear();
  }

 private:
  static constexpr std::int64_t untouched = -1;
  int dimension_;
  std::vector<std::int64_t> slot_;  // per table row: its place in touched_, or untouched
  std::vector<std::int64_t> touched_;
  std::vector<T> values_;  // touched_.size() rows of dimension_
};

// One table, or the rows [first_row, first_row + rows) of one where a table is cut by rows over ranks.
template <class T>
struct sparse_parameter {
  using matrix_type = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

  int table = 0;               // which table of the model
  std::int64_t first_row = 0;  // of the table, where this piece begins
  matrix_type value;           // rows × dimension, row-major
  sparse_rows<T> gradient;

  sparse_parameter(int table_index, std::int64_t first, matrix_type values)
      : table(table_index),
        first_row(first),
        value(std::move(values)),
        gradient(value.rows(), static_cast<int>(value.cols())) {}

  [[nodiscard]] std::span<const T> values() const noexcept {
    return {value.data(), static_cast<std::size_t>(value.size())};
  }
  [[nodiscard]] std::span<T> row(std::int64_t index) noexcept {
    return {value.data() + index * value.cols(), static_cast<std::size_t>(value.cols())};
  }
};

}  // namespace shardwise::nn
