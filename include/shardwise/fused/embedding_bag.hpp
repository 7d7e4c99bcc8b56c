#pragma once
// fused::embedding_bag<T, Comm, Mesh>: DLRM's embedding layer, model-parallel tables behind a
// data-parallel output, forward and backward through the fused embedding-bag + all-to-all
// (fused/embedding_all_to_all.hpp). It lives in fused/, above nn/, because it is built on the fused
// operator; it is a layer as nn/'s are (forward, backward, named parameters).
//
//   tables     each table is whole on one rank (table-wise; the table-wise tables cut into contiguous
//              runs over the ranks, as the operator's plan cuts them) or cut by rows over every rank
//              (row-wise, for a table larger than one rank's share: rank r holds rows
//              [R·r/P, R·(r+1)/P)). Tables may differ in rows and width.
//   forward    bags (offsets + indices, as PyTorch's EmbeddingBag takes them) of the whole global batch
//              for the tables this rank holds a piece of (input_tables()); returns this rank's samples'
//              pooled embeddings {local batch, Σ widths}, table after table, as a dtensor on `mesh` in
//              the data-parallel layout col_1d<> (the layer's samples, whole features). A row-wise
//              table's pieces each pool the lookups that fall in their rows (a mean divides by the whole
//              bag's length), and the pieces' partial sums are added at the destination.
//              The bags must stay alive until backward, which reads them again.
//   backward   from the output's gradient: each piece receives its columns for the whole global batch
//              and adds every lookup's gradient into its touched rows (nn/sparse_parameter.hpp), fused
//              with the all-to-all that brings them (the operator's backward). Each forward takes one
//              backward: a backward with no forward before it, or a second one, throws.
//
// `group` is the model-parallel group: the ranks the tables are spread over, each also a data-parallel
// replica with its own samples. `mesh` is where this rank's dense layers live: one rank (a
// data_parallel_mesh's tensor_parallel() of grid {1}), whose col_1d<> tensors hold the local batch.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "shardwise/core/counter_random.hpp"
#include "shardwise/core/element_memory.hpp"
#include "shardwise/core/error.hpp"
#include "shardwise/core/kernel.hpp"
#include "shardwise/core/reused_buffer.hpp"
#include "shardwise/core/work.hpp"
#include "shardwise/fused/embedding_all_to_all.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/nn/no_grad.hpp"
#include "shardwise/nn/saved_for_backward.hpp"
#include "shardwise/nn/sparse_parameter.hpp"
#include "shardwise/tensor/describe.hpp"
#include "shardwise/tensor/dtensor.hpp"

namespace shardwise::fused {

enum class table_sharding { table_wise, row_wise };

struct embedding_table {
  std::int64_t rows = 0;
  int dimension = 0;
  table_sharding sharding = table_sharding::table_wise;
};

// Row `row`, column `column` of table `table` as a layer seeded `seed` starts: uniform in ±√(1/rows),
// as DLRM initialises its tables, whatever the ranks and the sharding.
template <class T>
[[nodiscard]] T initial_embedding(std::uint64_t seed, int table, std::int64_t rows, std::int64_t row,
                                  std::int64_t column) {
  const double bound = std::sqrt(1.0 / static_cast<double>(rows));
  return static_cast<T>((2 * uniform_at(splitmix64(seed + static_cast<std::uint64_t>(table)), row, column) - 1) *
                        bound);
}

template <class T, class Comm, class Mesh>
class embedding_bag {
 public:
  using output_layout = col_1d<>;
  using output_type = dtensor<T, output_layout, Mesh>;
  using operator_type = embedding_all_to_all<Comm, T>;

  // Collective over `group`: every rank passes the same tables, batch and options.
  embedding_bag(Comm& group, Mesh& mesh, std::vector<embedding_table> tables, std::int64_t global_batch,
                std::uint64_t seed, embedding_options options = {})
      : group_(&group),
        mesh_(&mesh),
        tables_(checked(group, mesh, std::move(tables))),
        shards_(shards_of(group, tables_)) {
    for (const auto& t : tables_) width_ += t.dimension;
    embedding_shape shape{static_cast<int>(shards_.size()), tables_.front().dimension, global_batch};
    for (const auto& s : shards_) {
      shape.dimensions.push_back(tables_[static_cast<std::size_t>(s.table)].dimension);
      shape.owners.push_back(s.owner);
    }
    operator_ = std::make_unique<operator_type>(group, std::move(shape), std::move(options));
    const int r = group.rank();
    for (const auto& s : shards_) {
      if (s.owner != r) continue;
      const auto& table = tables_[static_cast<std::size_t>(s.table)];
      auto& piece = pieces_.emplace_back(s.table, table.rows, s.first_row, s.rows, table.dimension);
      if (!element_memory::stored_on_this_thread()) continue;  // shapes only: no values to draw
      auto values = piece.value();
      for (std::int64_t i = 0; i < s.rows; ++i)
        for (int j = 0; j < table.dimension; ++j)
          values(i, j) = initial_embedding<T>(seed, s.table, table.rows, s.first_row + i, j);
    }
    for (int t = 0; t < static_cast<int>(tables_.size()); ++t)
      if (std::any_of(shards_.begin(), shards_.end(), [&](const shard& s) { return s.table == t && s.owner == r; }))
        input_tables_.push_back(t);
  }

  [[nodiscard]] const std::vector<embedding_table>& tables() const noexcept { return tables_; }
  // The tables whose bags forward() takes on this rank, in order: those it holds a piece of.
  [[nodiscard]] std::span<const int> input_tables() const noexcept { return input_tables_; }
  // This rank's samples: rows [first_row(), first_row() + rows()) of the global batch.
  [[nodiscard]] std::int64_t first_row() const { return operator_->plan().first_row(group_->rank()); }
  [[nodiscard]] std::int64_t rows() const { return operator_->plan().rows_of(group_->rank()); }
  [[nodiscard]] std::int64_t global_batch() const { return operator_->plan().shape().global_batch; }
  // The output's width: every table's, side by side.
  [[nodiscard]] std::int64_t width() const noexcept { return width_; }
  [[nodiscard]] operator_type& fused_operator() noexcept { return *operator_; }

  [[nodiscard]] output_type forward(std::span<const embedding_bags> bags) try {
    if (bags.size() != input_tables_.size())
      throw argument_error(group_->world_rank(), "fused::embedding_bag::forward",
                           "this rank holds pieces of " + std::to_string(input_tables_.size()) + " tables; got " +
                               std::to_string(bags.size()) + " bag sets");
    piece_bags_ = bags_of_pieces(bags);
    std::vector<std::span<const T>> values;
    for (const auto& p : pieces_) values.push_back(p.values());
    const auto pooled = (*operator_)(values, *piece_bags_);
    nn::release_under_no_grad(piece_bags_);
    // Each table's columns: its one piece's, or the sum of its row-wise pieces' in rank order; one
    // kernel that reads the pooled rows once, writes the output once and adds the pieces beyond a
    // table's first.
    output_type out(*mesh_, {rows(), width_});
    const auto& plan = operator_->plan();
    const auto pooled_width = static_cast<std::size_t>(plan.row_width());
    const double pooled_elements = static_cast<double>(rows()) * static_cast<double>(pooled_width);
    const double output_elements = static_cast<double>(rows() * width_);
    run_kernel(out.mesh().world(),
               work{pooled_elements - output_elements, sizeof(T) * (pooled_elements + output_elements)},
               "embedding bag output", [&] {
                 auto y = out.local();
                 std::vector<char> started(tables_.size(), 0);
                 for (std::size_t s = 0; s < shards_.size(); ++s) {
                   const int t = shards_[s].table;
                   const int D = tables_[static_cast<std::size_t>(t)].dimension;
                   auto& first = started[static_cast<std::size_t>(t)];
                   for (std::int64_t b = 0; b < rows(); ++b) {
                     const T* piece = pooled.data() + static_cast<std::size_t>(b) * pooled_width +
                                      static_cast<std::size_t>(plan.column_of(static_cast<int>(s)));
                     T* into = &y(b, column_of(t));
                     for (int j = 0; j < D; ++j) into[j] = first ? into[j] + piece[j] : piece[j];
                   }
                   first = 1;
                 }
               });
    return out;
  } catch (...) {
    rethrow_within_call(group_->world_rank(),
                        call_text("fused::embedding_bag::forward", std::to_string(bags.size()) + " bag sets"));
  }

  // Adds the gradient of the tables' pieces this rank holds, given the gradient of forward's output.
  void backward(const output_type& output_gradient) try {
    const auto piece_bags =
        nn::take_saved(piece_bags_, group_->world_rank(), "fused::embedding_bag::backward", "its lookups");
    // Every piece takes its table's columns.
    const auto& plan = operator_->plan();
    const auto pooled_width = static_cast<std::size_t>(plan.row_width());
    // Shapes only: the operator reads no gradient values, so none are gathered (the unstored range).
    const auto piece_gradient = piece_gradient_.take(static_cast<std::size_t>(rows()) * pooled_width);
    // One kernel that reads the output's gradient once and writes every piece's columns once.
    const double pooled_elements = static_cast<double>(piece_gradient.size());
    run_kernel(
        output_gradient.mesh().world(), work{0, sizeof(T) * (pooled_elements + static_cast<double>(rows() * width_))},
        "embedding bag gradient", [&] {
          std::ranges::fill(piece_gradient, T(0));
          const auto dy = output_gradient.local();
          for (std::size_t s = 0; s < shards_.size(); ++s) {
            const int t = shards_[s].table;
            const int D = tables_[static_cast<std::size_t>(t)].dimension;
            for (std::int64_t b = 0; b < rows(); ++b)
              std::copy_n(dy.row(b).data() + column_of(t), D,
                          piece_gradient.begin() + static_cast<std::ptrdiff_t>(
                                                       static_cast<std::size_t>(b) * pooled_width +
                                                       static_cast<std::size_t>(plan.column_of(static_cast<int>(s)))));
          }
        });
    std::vector<nn::sparse_rows<T>*> gradients;
    for (auto& p : pieces_) gradients.push_back(&p.gradient);
    operator_->backward(std::span<const T>(piece_gradient), piece_bags,
                        std::span<nn::sparse_rows<T>* const>(gradients));
  } catch (...) {
    rethrow_within_call(group_->world_rank(), call_text("fused::embedding_bag::backward", describe(output_gradient)));
  }

  // f(name, piece) for each table piece this rank holds, named "tables.<t>" after its table whether it
  // holds the whole table or rows of it (the piece says which rows), as a dense parameter's block is
  // named after its parameter: a rank holds at most one piece of a table.
  template <class F>
  void for_each_sparse_parameter(F&& f, const std::string& prefix = "") {
    for (auto& p : pieces_) f(prefix + "tables." + std::to_string(p.table), p);
  }

 private:
  // A table, or the rows [first_row, first_row + rows) of it that `owner` holds.
  struct shard {
    int table;
    std::int64_t first_row;
    std::int64_t rows;
    int owner;
  };

  static std::vector<embedding_table> checked(Comm& group, Mesh& mesh, std::vector<embedding_table> tables) {
    const auto fail = [&](const std::string& what) {
      throw argument_error(group.world_rank(), "fused::embedding_bag", what);
    };
    if (mesh.world().size() != 1)
      fail("the output's mesh must be one rank (a data_parallel_mesh's tensor_parallel() of grid {1}); it has " +
           std::to_string(mesh.world().size()));
    if (tables.empty()) fail("needs at least one table");
    for (std::size_t t = 0; t < tables.size(); ++t)
      if (tables[t].rows < 1 || tables[t].dimension < 1)
        fail("table " + std::to_string(t) + " has " + std::to_string(tables[t].rows) + " rows of width " +
             std::to_string(tables[t].dimension) + "; both must be positive");
    return tables;
  }

  // Rank r holds its run of the table-wise tables, then its rows of every row-wise table.
  static std::vector<shard> shards_of(Comm& group, const std::vector<embedding_table>& tables) {
    const int P = group.size();
    std::vector<int> whole;
    for (int t = 0; t < static_cast<int>(tables.size()); ++t)
      if (tables[static_cast<std::size_t>(t)].sharding == table_sharding::table_wise) whole.push_back(t);
    const auto K = static_cast<std::int64_t>(whole.size());
    std::vector<shard> shards;
    for (int r = 0; r < P; ++r) {
      for (auto k = K * r / P; k < K * (r + 1) / P; ++k) {
        const int t = whole[static_cast<std::size_t>(k)];
        shards.push_back({t, 0, tables[static_cast<std::size_t>(t)].rows, r});
      }
      for (int t = 0; t < static_cast<int>(tables.size()); ++t) {
        const auto& table = tables[static_cast<std::size_t>(t)];
        if (table.sharding != table_sharding::row_wise) continue;
        const std::int64_t first = table.rows * r / P, end = table.rows * (r + 1) / P;
        shards.push_back({t, first, end - first, r});
      }
    }
    return shards;
  }

  [[nodiscard]] std::int64_t column_of(int table) const {
    std::int64_t column = 0;
    for (int t = 0; t < table; ++t) column += tables_[static_cast<std::size_t>(t)].dimension;
    return column;
  }

  // The operator's bags for this rank's pieces: a whole table's as given; a row-wise piece's, the
  // lookups in its rows, made local to it, and each bag's whole length for the mean. Every index is
  // checked here, where the table has the user's number (the operator numbers its pieces).
  [[nodiscard]] std::vector<embedding_bags> bags_of_pieces(std::span<const embedding_bags> bags) {
    std::vector<embedding_bags> piece_bags;
    filtered_.resize(pieces_.size());
    for (std::size_t k = 0; k < pieces_.size(); ++k) {
      const auto& p = pieces_[k];
      const auto input = static_cast<std::size_t>(
          std::lower_bound(input_tables_.begin(), input_tables_.end(), p.table) - input_tables_.begin());
      const auto& given = bags[input];
      const std::int64_t rows = tables_[static_cast<std::size_t>(p.table)].rows;
      check_bags_shape("fused::embedding_bag::forward", given, global_batch(), p.table, group_->world_rank());
      const auto check = [&](std::int64_t index, std::size_t bag) {
        check_index("fused::embedding_bag::forward", index, rows, p.table, static_cast<std::int64_t>(bag),
                    group_->world_rank());
      };
      if (tables_[static_cast<std::size_t>(p.table)].sharding == table_sharding::table_wise) {
        for (std::size_t b = 0; b + 1 < given.offsets.size(); ++b)
          for (auto i = given.offsets[b]; i < given.offsets[b + 1]; ++i)
            check(given.indices[static_cast<std::size_t>(i)], b);
        piece_bags.push_back(given);
        continue;
      }
      auto& f = filtered_[k];
      f.offsets.assign(1, 0);
      f.indices.clear();
      f.lengths.clear();
      const std::int64_t end = p.first_row + p.rows();
      for (std::size_t b = 0; b + 1 < given.offsets.size(); ++b) {
        for (auto i = given.offsets[b]; i < given.offsets[b + 1]; ++i) {
          const auto index = given.indices[static_cast<std::size_t>(i)];
          check(index, b);
          if (index >= p.first_row && index < end) f.indices.push_back(index - p.first_row);
        }
        f.offsets.push_back(static_cast<std::int64_t>(f.indices.size()));
        f.lengths.push_back(given.offsets[b + 1] - given.offsets[b]);
      }
      piece_bags.push_back({f.offsets, f.indices, f.lengths});
    }
    return piece_bags;
  }

  struct filtered_bags {
    std::vector<std::int64_t> offsets, indices, lengths;
  };

  Comm* group_;
  Mesh* mesh_;
  std::vector<embedding_table> tables_;
  std::vector<shard> shards_;  // in the operator's table order: by owner
  std::int64_t width_ = 0;
  std::unique_ptr<operator_type> operator_;
  std::vector<nn::sparse_parameter<T>> pieces_;  // this rank's shards, in order
  std::vector<int> input_tables_;
  std::vector<filtered_bags> filtered_;  // per piece, for row-wise pieces
  // Per piece, the operator's bags of a forward, until its backward.
  std::optional<std::vector<embedding_bags>> piece_bags_;
  reused_buffer<T> piece_gradient_;
};

}  // namespace shardwise::fused
