#pragma once
// Embedding tables and bags every rank can build alike, and the serial computation of the whole
// output with Eigen: the reference the fused and baseline operators are compared with, bit for bit.
#include <Eigen/Core>
#include <cstdint>
#include <span>
#include <vector>

#include "shardwise/fused/embedding_all_to_all.hpp"

namespace shardwise::testing {

using embedding_matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Table t has 3 + 2t rows of inexact values, so the order of a sum shows in its bits.
inline embedding_matrix embedding_table(int t, int dimension) {
  embedding_matrix table(3 + 2 * t, dimension);
  for (Eigen::Index i = 0; i < table.rows(); ++i)
    for (Eigen::Index j = 0; j < table.cols(); ++j)
      table(i, j) = static_cast<float>((t * 131 + i * 31 + j * 7) % 1000) / 997.0F - 0.5F;
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
  embedding_matrix out = embedding_matrix::Zero(shape.global_batch, static_cast<Eigen::Index>(shape.tables) * shape.dimension);
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
struct rank_inputs {
  std::vector<embedding_matrix> tables;
  std::vector<bag_data> bags;
  std::vector<std::span<const float>> table_spans;
  std::vector<fused::embedding_bags> bag_spans;

  rank_inputs(const fused::embedding_plan& plan, int rank, int call) {
    for (int t = plan.first_table(rank); t < plan.first_table(rank + 1); ++t) {
      tables.push_back(embedding_table(t, plan.shape().dimension));
      bags.push_back(embedding_bags_of(t, plan.shape().global_batch, call));
    }
    for (std::size_t k = 0; k < tables.size(); ++k) {
      table_spans.emplace_back(tables[k].data(), static_cast<std::size_t>(tables[k].size()));
      bag_spans.push_back({bags[k].offsets, bags[k].indices});
    }
  }
  rank_inputs(const rank_inputs&) = delete;
  rank_inputs& operator=(const rank_inputs&) = delete;
};

}  // namespace shardwise::testing
