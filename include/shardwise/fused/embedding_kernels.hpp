#pragma once
// The kernels of the embedding bag, the work each logical workgroup task does: pool_bag sums (or
// averages) the table rows one bag looks up into one output row. Every path of the operator
// (fused/embedding_all_to_all.hpp) pools with this code, row by row in lookup order, so their results
// are bitwise equal to each other and to the serial loop.
#include <Eigen/Core>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>

#include "shardwise/core/error.hpp"

namespace shardwise::fused {

enum class pooling { sum, mean };

// One table's lookups for the whole global batch: bag b is indices[offsets[b] .. offsets[b + 1]), as
// PyTorch's EmbeddingBag takes them.
struct embedding_bags {
  std::span<const std::int64_t> offsets;  // global batch + 1 entries, non-decreasing
  std::span<const std::int64_t> indices;
};

[[nodiscard]] inline std::int64_t lookups(const embedding_bags& bags, std::int64_t row) {
  return bags.offsets[static_cast<std::size_t>(row) + 1] - bags.offsets[static_cast<std::size_t>(row)];
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

}  // namespace detail

// Pools bag `row` of one table into out[0, D), each element summed in lookup order (so the bits are the
// serial loop's). The row is summed in blocks of `block` elements held in registers across the bag's
// rows, then stored once: summing row by row into `out` loaded and stored the output once per lookup
// and took 1.6-1.8x the time on one thread. Through Eigen's fixed-size arrays this is vectorised at
// -O2 too (GCC vectorises the plain loop only at -O3).
template <class T>
void pool_bag(std::span<const T> table, int dimension, const embedding_bags& bags, std::int64_t row, pooling how,
              T* out, int rank) {
  constexpr int block = 32;
  const auto D = static_cast<std::size_t>(dimension);
  const std::int64_t table_rows = static_cast<std::int64_t>(table.size() / D);
  const auto begin = bags.offsets[static_cast<std::size_t>(row)], end = bags.offsets[static_cast<std::size_t>(row) + 1];
  const auto index_at = [&](std::int64_t i) { return bags.indices[static_cast<std::size_t>(i)]; };
  const auto row_of = [&](std::int64_t index) { return table.data() + static_cast<std::size_t>(index) * D; };
  // The bag's rows are random rows of a table in memory: asking for all of them before the sum lets
  // their loads overlap, where the sum alone keeps only a row or two in flight (pooling took half the
  // time with this, on both paths).
  for (auto i = begin; i < end; ++i) {
    const auto index = index_at(i);
    if (index < 0 || index >= table_rows)
      throw argument_error(rank, "embedding_all_to_all",
                           "index " + std::to_string(index) + " (bag " + std::to_string(row) + ") is outside a table of " +
                               std::to_string(table_rows) + " rows");
    detail::prefetch_row(row_of(index), D);
  }
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
    if (how == pooling::mean && end > begin) sum /= static_cast<T>(end - begin);
    Eigen::Map<Array>(out + at, columns) = sum;
  };
  std::size_t at = 0;
  for (; at + block <= D; at += block) pool_columns(std::type_identity<Eigen::Array<T, block, 1>>{}, at, block);
  if (at < D)
    pool_columns(std::type_identity<Eigen::Array<T, Eigen::Dynamic, 1, 0, block, 1>>{}, at,
                 static_cast<Eigen::Index>(D - at));
}

}  // namespace shardwise::fused
