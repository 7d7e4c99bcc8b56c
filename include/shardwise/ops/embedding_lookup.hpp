#pragma once
// Looking up rows of an embedding table whose rows (the vocabulary) are cut over the mesh, forward and
// backward, as Megatron's VocabParallelEmbedding: every rank sees every token id, contributes the rows
// it owns and zeros for the others, and a sum over the mesh completes each row.
//
//   whole = zero (tokens x hidden);
//   add_owned_rows(table, tokens, whole);           // this rank's rows; the rest stay zero
//   sum whole over the mesh                         // every row complete (nn/embedding.hpp)
//   ...
//   add_to_owned_rows(table_gradient, tokens, dx);  // backward: dx whole on every rank
#include <Eigen/Core>
#include <cstdint>
#include <span>
#include <string>

#include "shardwise/core/error.hpp"
#include "shardwise/core/kernel.hpp"
#include "shardwise/tensor/dtensor.hpp"

namespace shardwise {

template <class T>
using whole_matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

namespace detail {

// visit(position, block, local row) for every token whose row lies in one of this rank's blocks. An id
// outside the table is an error of `operation` naming it as `what` ("token", "target").
template <class Table, class Visit>
void for_each_owned_token(const Table& table, std::span<const std::int32_t> tokens, const char* operation,
                          const char* what, Visit&& visit) {
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    const std::int64_t id = tokens[t];
    if (id < 0 || id >= table.rows())
      throw argument_error(table.mesh().world().world_rank(), operation,
                           std::string(what) + " " + std::to_string(id) + " at position " + std::to_string(t) +
                               " is outside the vocabulary of " + std::to_string(table.rows()));
    for (int b = 0; b < table.block_count(); ++b) {
      const block_info& info = table.block(b);
      if (id >= info.row_offset && id < info.row_offset + info.rows) visit(t, b, id - info.row_offset);
    }
  }
}

// The work of adding the rows of the tokens this rank owns (a kernel, core/kernel.hpp): per owned token,
// one operation per column, the row read, the destination read and written.
template <class T, class Layout, class Mesh>
[[nodiscard]] work owned_rows_work(const dtensor<T, Layout, Mesh>& table, std::span<const std::int32_t> tokens,
                                   const char* operation) {
  double owned = 0;
  for_each_owned_token(table, tokens, operation, "token", [&](std::size_t, int, std::int64_t) { ++owned; });
  const double elements = owned * static_cast<double>(table.cols());
  return {elements, 3 * sizeof(T) * elements};
}

}  // namespace detail

// whole.row(t) += table row tokens[t], for the rows this rank owns. `whole` is tokens x hidden (an Eigen
// matrix or a block of a dtensor).
template <class T, class Layout, class Mesh, class Whole>
void add_owned_rows(const dtensor<T, Layout, Mesh>& table, std::span<const std::int32_t> tokens, Whole& whole) {
  const char* const operation = "embedding lookup";
  run_kernel(
      table.mesh().world(), [&] { return detail::owned_rows_work(table, tokens, operation); }, operation,
      [&] {
        detail::for_each_owned_token(table, tokens, operation, "token", [&](std::size_t t, int b, std::int64_t row) {
          whole.row(static_cast<Eigen::Index>(t)) += table.local(b).row(row);
        });
      });
}

// The backward of the lookup: table_gradient row tokens[t] += gradient.row(t), for the rows this rank
// owns (a token seen twice adds twice).
template <class G, class T, class Layout, class Mesh>
void add_to_owned_rows(dtensor<G, Layout, Mesh>& table_gradient, std::span<const std::int32_t> tokens,
                       const whole_matrix<T>& gradient) {
  const char* const operation = "embedding lookup backward";
  run_kernel(
      table_gradient.mesh().world(), [&] { return detail::owned_rows_work(table_gradient, tokens, operation); },
      operation,
      [&] {
        detail::for_each_owned_token(
            table_gradient, tokens, operation, "token", [&](std::size_t t, int b, std::int64_t row) {
              table_gradient.local(b).row(row) += gradient.row(static_cast<Eigen::Index>(t)).template cast<G>();
            });
      });
}

}  // namespace shardwise
