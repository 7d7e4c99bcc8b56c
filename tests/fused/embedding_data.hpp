#pragma once
// Embedding tables and bags every rank can build alike, and the serial computation of the whole
// output with Eigen: the reference the fused and baseline operators are compared with, bit for bit;
// the gradient of an output and the tables' gradients it gives, serially.
#include <Eigen/Core>
#include <cstdint>
#include <span>
#include <vector>

#include "shardwise/fused/embedding_all_to_all.hpp"

namespace shardwise::testing {

template <class T>
using basic_embedding_matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using embedding_matrix = basic_embedding_matrix<float>;

// Table t has 3 + 2t rows of inexact values, so the order of a sum shows in its bits.
template <class T = float>
basic_embedding_matrix<T> embedding_table(int t, int dimension) {
  basic_embedding_matrix<T> table(3 + 2 * t, dimension);
  for (Eigen::Index i = 0; i < table.rows(); ++i)
    for (Eigen::Index j = 0; j < table.cols(); ++j)
      table(i, j) = static_cast<T>((t * 131 + i * 31 + j * 7) % 1000) / T(997) - T(0.5);
  return table;
}

// Lookups into table t for call `call`: bags of 0 to 6 indices, different in every call.
struct bag_data {
  std::vector<std::int64_t> offsets{0};
  std::vector<std::int64_t> indices;
};
inline bag_data embedding_bags_of(int t, std::int64_t batch, int call) {
  bag_data bags;
  const std::int64_t rows = 3 + 2 * t;
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t length = (b * 7 + t * 3 + call * 5) % 7;
    for (std::int64_t i = 0; i < length; ++i) bags.indices.push_back((b * 13 + t * 5 + i * 17 + call) % rows);
    bags.offsets.push_back(static_cast<std::int64_t>(bags.indices.size()));
  }
  return bags;
}

// The whole output {global batch, tables × dimension}, serially.
inline embedding_matrix serial_embedding(const fused::embedding_shape& shape, fused::pooling how, int call) {
  embedding_matrix out =
      embedding_matrix::Zero(shape.global_batch, static_cast<Eigen::Index>(shape.tables) * shape.dimension);
  for (int t = 0; t < shape.tables; ++t) {
    const auto table = embedding_table(t, shape.dimension);
    const auto bags = embedding_bags_of(t, shape.global_batch, call);
    for (std::int64_t b = 0; b < shape.global_batch; ++b) {
      auto pooled = out.block(b, static_cast<Eigen::Index>(t) * shape.dimension, 1, shape.dimension);
      const auto begin = bags.offsets[static_cast<std::size_t>(b)], end = bags.offsets[static_cast<std::size_t>(b) + 1];
      for (auto i = begin; i < end; ++i) pooled += table.row(bags.indices[static_cast<std::size_t>(i)]);
      if (how == fused::pooling::mean && end > begin) pooled /= static_cast<float>(end - begin);
    }
  }
  return out;
}

// One rank's inputs: its tables and their bags for one call (the spans point into the owned data).
template <class T>
struct basic_rank_inputs {
  std::vector<basic_embedding_matrix<T>> tables;
  std::vector<bag_data> bags;
  std::vector<std::span<const T>> table_spans;
  std::vector<fused::embedding_bags> bag_spans;

  basic_rank_inputs(const fused::embedding_plan& plan, int rank, int call) {
    for (int t = plan.first_table(rank); t < plan.first_table(rank + 1); ++t) {
      tables.push_back(embedding_table<T>(t, plan.dimension_of(t)));
      bags.push_back(embedding_bags_of(t, plan.shape().global_batch, call));
    }
    for (std::size_t k = 0; k < tables.size(); ++k) {
      table_spans.emplace_back(tables[k].data(), static_cast<std::size_t>(tables[k].size()));
      bag_spans.push_back({bags[k].offsets, bags[k].indices});
    }
  }
  basic_rank_inputs(const basic_rank_inputs&) = delete;
  basic_rank_inputs& operator=(const basic_rank_inputs&) = delete;
};
using rank_inputs = basic_rank_inputs<float>;

// Element (row, column) of the gradient of the whole output {global batch, row width} in call `call`.
template <class T>
T output_gradient_at(std::int64_t row, std::int64_t column, int call) {
  return static_cast<T>((row * 37 + column * 11 + call * 7) % 101) / T(97) - T(0.5);
}

// Table t's gradient from the whole output's gradient (output_gradient_at), serially: each bag's
// gradient row added into every row it looked up, over the bag's length for a mean (`lengths`: the
// mean's length of each bag, when not the lookups).
template <class T>
basic_embedding_matrix<T> serial_table_gradient(const fused::embedding_plan& plan, int t, std::int64_t rows,
                                                const bag_data& bags, fused::pooling how, int call,
                                                const std::vector<std::int64_t>& lengths = {}) {
  const int D = plan.dimension_of(t);
  basic_embedding_matrix<T> gradient = basic_embedding_matrix<T>::Zero(rows, D);
  for (std::int64_t b = 0; b < plan.shape().global_batch; ++b) {
    const auto begin = bags.offsets[static_cast<std::size_t>(b)], end = bags.offsets[static_cast<std::size_t>(b) + 1];
    const auto length = lengths.empty() ? end - begin : lengths[static_cast<std::size_t>(b)];
    Eigen::Matrix<T, 1, Eigen::Dynamic> g(D);
    for (int j = 0; j < D; ++j) g(j) = output_gradient_at<T>(b, plan.column_of(t) + j, call);
    if (how == fused::pooling::mean && length > 0) g /= static_cast<T>(length);
    for (auto i = begin; i < end; ++i) gradient.row(bags.indices[static_cast<std::size_t>(i)]) += g;
  }
  return gradient;
}

}  // namespace shardwise::testing
