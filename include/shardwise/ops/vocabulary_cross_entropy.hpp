#pragma once
// The cross-entropy of a language model's head whose vocabulary is cut over the mesh, forward and
// backward, as Megatron's vocab-parallel cross-entropy: each rank computes the logits of its own
// vocabulary rows only (logits = h · tableᵀ, tokens x its rows), and the softmax statistics are reduced
// over the mesh — the maximum of every row, then the sum of exponentials and the target's logit —
// so the whole logits never exist on any rank:
//
//   loss = mean over tokens t of  log Σ_v exp(z_tv − m_t) + m_t − z_t,target,    m_t = max_v z_tv
//   dz = (softmax(z) − one_hot(target)) · scale / tokens;   d table = dzᵀ · h;   dh = dz · table (summed)
//
// `hidden` is the whole tokens x hidden matrix on every rank (a replicated tensor: the activations
// gathered), storage of the rank like the softmax's columns, so both count in its memory high-water mark.
// Its gradient is each rank's addend dz · table rows, summed over the mesh into the layout the caller
// names.
#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "shardwise/comm/reduction.hpp"
#include "shardwise/core/element.hpp"
#include "shardwise/core/error.hpp"
#include "shardwise/core/kernel.hpp"
#include "shardwise/core/shared_buffer.hpp"
#include "shardwise/layout/partial_sum.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/layout/vector_layout.hpp"
#include "shardwise/ops/embedding_lookup.hpp"
#include "shardwise/ops/gemm.hpp"
#include "shardwise/tensor/describe.hpp"
#include "shardwise/tensor/distribute.hpp"
#include "shardwise/tensor/dtensor.hpp"

namespace shardwise {

// What backward needs: the hidden states, this rank's columns of the softmax, the targets.
template <class T, class Mesh>
struct cross_entropy_saved {
  dtensor<T, replicated<>, Mesh> hidden;
  shared_buffer<T> probabilities;  // tokens x this rank's vocabulary rows, row-major
  std::int64_t vocabulary_rows = 0;
  std::vector<std::int32_t> targets;

  [[nodiscard]] Eigen::Map<const whole_matrix<T>> probability_matrix() const {
    return {probabilities.data(), static_cast<Eigen::Index>(targets.size()), vocabulary_rows};
  }
};

namespace detail {
// A rows x cols matrix of the rank's storage (counted; zeros).
template <class T>
[[nodiscard]] shared_buffer<T> matrix_storage(Eigen::Index rows, Eigen::Index cols) {
  return shared_buffer<T>::zeros(static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols));
}
}  // namespace detail

// Collective over the table's mesh. Returns the mean loss in nats per token, equal on every rank, and
// keeps in `saved` what the backward needs (the last call's is given back first).
template <class T, split_layout Layout, class Mesh>
[[nodiscard]] double vocabulary_cross_entropy(dtensor<T, replicated<>, Mesh> hidden,
                                              const dtensor<T, Layout, Mesh>& table,
                                              std::span<const std::int32_t> targets,
                                              std::optional<cross_entropy_saved<T, Mesh>>& saved) try {
  auto& world = table.mesh().world();
  const auto tokens = static_cast<std::size_t>(hidden.rows());
  if (targets.size() != tokens || hidden.cols() != table.cols())
    throw argument_error(world.world_rank(), "vocabulary_cross_entropy",
                         std::to_string(targets.size()) + " targets for " + std::to_string(tokens) +
                             " hidden states of width " + std::to_string(hidden.cols()) + " (the table is " +
                             extents_string(table.extents()) + ")");
  const block_info& rows = table.block(0);
  const auto vocabulary_rows = static_cast<double>(rows.rows);
  const auto hidden_width = static_cast<double>(hidden.cols());
  const double logit_count = static_cast<double>(tokens) * vocabulary_rows;
  // The logits, then their softmax in place (as Megatron's), kept for the backward pass: storage sized
  // before its kernels, which may not run (shapes-only simulation).
  saved.reset();
  auto probabilities = detail::matrix_storage<T>(hidden.rows(), rows.rows);
  detail::strided_map<T> logits(probabilities.data(), hidden.rows(), rows.rows, Eigen::OuterStride<>(rows.rows));
  run_kernel(world, gemm_work<T>(static_cast<double>(tokens), vocabulary_rows, hidden_width), "vocabulary logits", [&] {
    detail::gemm(detail::destination(logits), detail::operand(hidden.local(0)),
                 detail::operand(table.local(0)).transposed());
  });

  using A = accumulator_t<T>;  // the maxima, sums and arithmetic: float for bf16 logits
  std::vector<A> maximum(tokens, -std::numeric_limits<A>::infinity());
  run_kernel(world, {logit_count, sizeof(T) * logit_count}, "logit maxima", [&] {
    if (rows.rows > 0)
      for (std::size_t t = 0; t < tokens; ++t) maximum[t] = logits.row(static_cast<Eigen::Index>(t)).maxCoeff();
  });
  world.all_reduce(std::span<A>(maximum), op::max);

  // Target logits (read before the exponentials overwrite them), then sums of exponentials: one reduction.
  std::vector<A> sums(2 * tokens, A(0));
  run_kernel(world, {10 * logit_count, 2 * sizeof(T) * logit_count}, "logit exponentials", [&] {
    detail::for_each_owned_token(
        table, targets, "vocabulary_cross_entropy", "target",
        [&](std::size_t t, int, std::int64_t row) { sums[tokens + t] = logits(static_cast<Eigen::Index>(t), row); });
    for (std::size_t t = 0; t < tokens; ++t) {
      const auto row = static_cast<Eigen::Index>(t);
      logits.row(row) = (logits.row(row).template cast<A>().array() - maximum[t]).exp().matrix().template cast<T>();
      sums[t] = logits.row(row).template cast<A>().sum();
    }
  });
  world.all_reduce(std::span<A>(sums), op::sum);

  double loss = 0;
  run_kernel(world, {logit_count, 2 * sizeof(T) * logit_count}, "probabilities", [&] {
    for (std::size_t t = 0; t < tokens; ++t) {
      loss += std::log(static_cast<double>(sums[t])) + maximum[t] - sums[tokens + t];
      const auto row = static_cast<Eigen::Index>(t);
      logits.row(row) = (logits.row(row).template cast<A>() / sums[t]).template cast<T>();
    }
  });
  saved.emplace(cross_entropy_saved<T, Mesh>{std::move(hidden), std::move(probabilities), rows.rows,
                                             std::vector<std::int32_t>(targets.begin(), targets.end())});
  return loss / static_cast<double>(tokens);
} catch (...) {
  rethrow_within_call(world_rank_of(table), call_text("vocabulary_cross_entropy", describe(hidden), describe(table)));
}

namespace detail {
// Adds the table's gradient (times `scale`) into `table_gradient` and returns this rank's addend of the
// hidden states' gradient, whole, pending a sum over the mesh; the logits' gradient is given back on
// return.
template <class T, class G, split_layout Layout, class Mesh>
[[nodiscard]] dtensor<T, partial_sum_over_all<replicated<>, Mesh::dimensions>, Mesh> hidden_gradient_addend(
    const cross_entropy_saved<T, Mesh>& saved, const dtensor<T, Layout, Mesh>& table,
    dtensor<G, Layout, Mesh>& table_gradient, T scale) {
  auto& world = table.mesh().world();
  const auto probabilities = saved.probability_matrix();
  const auto tokens = static_cast<double>(probabilities.rows());
  const auto vocabulary_rows = static_cast<double>(probabilities.cols());
  const auto hidden_width = static_cast<double>(saved.hidden.cols());
  const double logit_count = tokens * vocabulary_rows;
  const auto logits_gradient_storage = matrix_storage<T>(probabilities.rows(), probabilities.cols());
  strided_map<T> logits_gradient(logits_gradient_storage.data(), probabilities.rows(), probabilities.cols(),
                                 Eigen::OuterStride<>(probabilities.cols()));
  run_kernel(world, {logit_count, 2 * sizeof(T) * logit_count}, "logits gradient", [&] {
    logits_gradient = probabilities;
    for_each_owned_token(
        table, saved.targets, "vocabulary_cross_entropy_backward", "target",
        [&](std::size_t t, int, std::int64_t row) { logits_gradient(static_cast<Eigen::Index>(t), row) -= T(1); });
    logits_gradient *= scale / static_cast<T>(saved.targets.size());
  });
  run_kernel(world, gemm_work<T, G>(vocabulary_rows, hidden_width, tokens, true), "vocabulary table gradient", [&] {
    gemm(destination(table_gradient.local(0)), operand(logits_gradient).transposed(), operand(saved.hidden.local(0)),
         true);
  });
  dtensor<T, partial_sum_over_all<replicated<>, Mesh::dimensions>, Mesh> addend(table.mesh(), saved.hidden.extents());
  run_kernel(world, gemm_work<T>(tokens, hidden_width, vocabulary_rows), "hidden gradient",
             [&] { gemm(destination(addend.local(0)), operand(logits_gradient), operand(table.local(0))); });
  return addend;
}
}  // namespace detail

// Adds the table's gradient (times `scale`) into `table_gradient` and returns the hidden states'
// gradient in HiddenLayout. Each rank's logits give an addend of the whole gradient: summed in place
// when HiddenLayout is replicated (the 1-D family's activations), otherwise straight into HiddenLayout's
// blocks, by one reduce-scatter over the mesh when they tile the matrix (redistribute of a temporary
// partial sum, tensor/distribute.hpp), so no rank holds the whole sum. Collective over the table's mesh.
template <class HiddenLayout, class T, class G, split_layout Layout, class Mesh>
[[nodiscard]] dtensor<T, HiddenLayout, Mesh> vocabulary_cross_entropy_backward(
    const cross_entropy_saved<T, Mesh>& saved, const dtensor<T, Layout, Mesh>& table,
    dtensor<G, Layout, Mesh>& table_gradient, T scale) try {
  return redistribute<HiddenLayout>(detail::hidden_gradient_addend(saved, table, table_gradient, scale));
} catch (...) {
  rethrow_within_call(world_rank_of(table), call_text("vocabulary_cross_entropy_backward", describe(table)));
}

}  // namespace shardwise
