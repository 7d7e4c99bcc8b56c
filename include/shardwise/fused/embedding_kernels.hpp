#pragma once
// The kernels of the embedding bag, the work each logical workgroup task does: pool_bag sums (or
// averages) the table rows one bag looks up into one output row; add_bag_gradient, its backward, adds
// the pooled row's gradient into each row the bag looked up. Every path of the operator
// (fused/embedding_all_to_all.hpp) runs this code, row by row in lookup order, so their results are
// bitwise equal to each other (and the forward's to the serial loop).
#include <Eigen/Core>

#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "shardwise/comm/detail/streaming_store.hpp"
#include "shardwise/core/error.hpp"

namespace shardwise::fused {

enum class pooling { sum, mean };

// How pool_bag stores a pooled row: through the caches, or around them (non-temporal stores,
// comm/detail/streaming_store.hpp), or not at all, on a rank that stores no elements (shapes only:
// the indices are checked, nothing is summed). Around them saves reading every output line before it
// is overwritten, where the outputs are far larger than the caches and nobody reads them before the
// call ends; the caller fences them (detail::finish_streaming) before another rank may read them.
enum class row_stores { cached, streaming, none };

// One table's lookups for the whole global batch: bag b is indices[offsets[b] .. offsets[b + 1]), as
// PyTorch's EmbeddingBag takes them.
struct embedding_bags {
  std::span<const std::int64_t> offsets;  // global batch + 1 entries, non-decreasing
  std::span<const std::int64_t> indices;
  // Each bag's length as the mean counts it, where it is not the lookups given: a table cut by rows
  // holds part of each bag, and its mean divides by the whole bag's length. Empty: the lookups given.
  std::span<const std::int64_t> lengths{};
};

[[nodiscard]] inline std::int64_t lookups(const embedding_bags& bags, std::int64_t row) {
  return bags.offsets[static_cast<std::size_t>(row) + 1] - bags.offsets[static_cast<std::size_t>(row)];
}
// What a mean over bag `row` divides by.
[[nodiscard]] inline std::int64_t mean_length(const embedding_bags& bags, std::int64_t row) {
  return bags.lengths.empty() ? lookups(bags, row) : bags.lengths[static_cast<std::size_t>(row)];
}

namespace detail {

// Asks for the cache lines of one table row (a hint: no effect on results).
template <class T>
void prefetch_row(const T* row, std::size_t elements) {
#if defined(__GNUC__)
  constexpr std::size_t per_line = 64 / sizeof(T);
  for (std::size_t at = 0; at < elements; at += per_line) __builtin_prefetch(row + at);
#else
  (void)row, (void)elements;
#endif
}

[[noreturn, gnu::cold, gnu::noinline]] inline void throw_index_outside(std::string_view operation, std::int64_t index,
                                                                       std::int64_t table_rows, int table,
                                                                       std::int64_t bag, int rank) {
  throw argument_error(rank, operation,
                       "index " + std::to_string(index) + " (table " + std::to_string(table) + ", bag " +
                           std::to_string(bag) + ") is outside a table of " + std::to_string(table_rows) + " rows");
}

}  // namespace detail

// Throws, as `operation` on `rank`, unless `bags` (of table `table`) are `batch` bags: batch + 1
// non-decreasing offsets from 0 to at most the indices, and no lengths or one per bag.
inline void check_bags_shape(std::string_view operation, const embedding_bags& bags, std::int64_t batch, int table,
                             int rank) {
  const auto& o = bags.offsets;
  const auto B = static_cast<std::size_t>(batch);
  if (o.size() != B + 1 || o.front() != 0 || !std::is_sorted(o.begin(), o.end()) ||
      o.back() > static_cast<std::int64_t>(bags.indices.size()))
    throw argument_error(rank, operation,
                         "the offsets of table " + std::to_string(table) + " must be " + std::to_string(B + 1) +
                             " non-decreasing entries from 0 to at most the " + std::to_string(bags.indices.size()) +
                             " indices");
  if (!bags.lengths.empty() && bags.lengths.size() != B)
    throw argument_error(rank, operation,
                         "the lengths of table " + std::to_string(table) + " must be " + std::to_string(B) +
                             " entries; got " + std::to_string(bags.lengths.size()));
}

// Throws naming the table and the bag when `index` is not a row of a table of `table_rows` rows. A
// comparison inlined into the lookup loops, the throw a call apart: as one call per lookup, the
// function's frame stores waited behind the pooled rows' stores into the peers' outputs.
inline void check_index(std::string_view operation, std::int64_t index, std::int64_t table_rows, int table,
                        std::int64_t bag, int rank) {
  if (index < 0 || index >= table_rows) [[unlikely]]
    detail::throw_index_outside(operation, index, table_rows, table, bag, rank);
}

// Pools bag `row` of this rank's table number `table_number` into out[0, D), each element summed in lookup order (so
// the bits are the serial loop's). The row is summed in blocks of `block` elements held in registers across the bag's
// rows, then stored once: summing row by row into `out` loaded and stored the output once per lookup
// and took 1.6-1.8x the time on one thread. Through Eigen's fixed-size arrays this is vectorised at
// -O2 too (GCC vectorises the plain loop only at -O3).
template <class T>
void pool_bag(std::span<const T> table, int table_number, int dimension, const embedding_bags& bags, std::int64_t row,
              pooling how, T* out, int rank, row_stores stores) {
  constexpr int block = 32;
  const auto D = static_cast<std::size_t>(dimension);
  const std::int64_t table_rows = static_cast<std::int64_t>(table.size() / D);
  const auto begin = bags.offsets[static_cast<std::size_t>(row)], end = bags.offsets[static_cast<std::size_t>(row) + 1];
  const auto length = mean_length(bags, row);
  const auto index_at = [&](std::int64_t i) { return bags.indices[static_cast<std::size_t>(i)]; };
  const auto row_of = [&](std::int64_t index) { return table.data() + static_cast<std::size_t>(index) * D; };
  // The bag's rows are random rows of a table in memory: asking for all of them before the sum lets
  // their loads overlap, where the sum alone keeps only a row or two in flight (pooling took half the
  // time with this, on both paths).
  const bool values = stores != row_stores::none;
  for (auto i = begin; i < end; ++i) {
    const auto index = index_at(i);
    check_index("embedding_all_to_all", index, table_rows, table_number, row, rank);
    if (values) detail::prefetch_row(row_of(index), D);
  }
  if (!values) return;
  // Both paths pool a table's bags in turn, so the next bag's rows (its first 16) are asked for too:
  // they arrive while this bag is summed.
  if (static_cast<std::size_t>(row) + 2 < bags.offsets.size())
    for (auto i = end; i < std::min(end + 16, bags.offsets[static_cast<std::size_t>(row) + 2]); ++i)
      if (index_at(i) >= 0 && index_at(i) < table_rows) detail::prefetch_row(row_of(index_at(i)), D);
  // Columns [at, at + columns) of the bag's sum into out; `Array` is a block in registers (or, for the
  // last columns of a dimension that is not a multiple of `block`, on the stack).
  const auto pool_columns = [&]<class Array>(std::type_identity<Array>, std::size_t at, Eigen::Index columns) {
    Array sum = Array::Zero(columns);
    for (auto i = begin; i < end; ++i) sum += Eigen::Map<const Array>(row_of(index_at(i)) + at, columns);
    if (how == pooling::mean && length > 0) sum /= static_cast<T>(length);
    if (stores == row_stores::streaming) {
      // Through a copy: were the block's own address taken, it would live in memory, stored to at every
      // lookup, and those stores wait behind the output's in a full store buffer.
      alignas(64) std::array<T, block> staged;
      Eigen::Map<Array>(staged.data(), columns) = sum;
      shardwise::detail::store_elements(out + at, staged.data(), static_cast<std::size_t>(columns), true);
    } else {
      Eigen::Map<Array>(out + at, columns) = sum;
    }
  };
  std::size_t at = 0;
  for (; at + block <= D; at += block) pool_columns(std::type_identity<Eigen::Array<T, block, 1>>{}, at, block);
  // A last 16 columns (dimension 16, as DLRM trains on Criteo's tables) in registers too: through the
  // block of dynamic size, pooling Criteo's tables took 7% longer.
  if (at + 16 == D) pool_columns(std::type_identity<Eigen::Array<T, 16, 1>>{}, at, 16);
  else if (at < D)
    pool_columns(std::type_identity<Eigen::Array<T, Eigen::Dynamic, 1, 0, block, 1>>{}, at,
                 static_cast<Eigen::Index>(D - at));
}

// A table's gradient as rows that a batch touches: row(index) is the gradient of table row `index`
// (dimension elements, zeros when first touched) of a table of table_rows() rows, as nn::sparse_rows
// gives it.
template <class G, class T>
concept gradient_rows = requires(G& gradient, const G& view, std::int64_t index) {
  { gradient.row(index) } -> std::same_as<T*>;
  { view.table_rows() } -> std::convertible_to<std::int64_t>;
  { view.dimension() } -> std::convertible_to<int>;
};

// Adds the gradient of bag `row`'s pooled row (of this rank's table number `table_number`), `gradient` (dimension
// elements), into every row the bag looked up, in lookup order: the gradient itself (sum), or it over the bag's length
// (mean). Where the rank stores no elements (shapes only), `values` is false and the rows are only touched; the caller
// asks once a call, as pool_bag's callers do.
template <class T, gradient_rows<T> Rows>
void add_bag_gradient(Rows& table_gradient, int table_number, const embedding_bags& bags, std::int64_t row, pooling how,
                      const T* gradient, int rank, bool values) {
  using Array = Eigen::Array<T, Eigen::Dynamic, 1>;
  const int dimension = table_gradient.dimension();
  const std::int64_t table_rows = table_gradient.table_rows();
  const Eigen::Map<const Array> g(gradient, dimension);
  const auto length = mean_length(bags, row);
  const bool divides = how == pooling::mean && length > 0;
  for (auto i = bags.offsets[static_cast<std::size_t>(row)]; i < bags.offsets[static_cast<std::size_t>(row) + 1]; ++i) {
    const auto index = bags.indices[static_cast<std::size_t>(i)];
    check_index("embedding_all_to_all::backward", index, table_rows, table_number, row, rank);
    T* const touched = table_gradient.row(index);
    if (!values) continue;
    Eigen::Map<Array> into(touched, dimension);
    if (divides) into += g / static_cast<T>(length);
    else
      into += g;
  }
}

}  // namespace shardwise::fused
