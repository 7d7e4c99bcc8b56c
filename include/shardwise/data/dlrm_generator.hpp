#pragma once
// data::dlrm_generator: click data for a DLRM, made up as DLRM's own generator makes them (random dense
// features, bags of indices per table with power-law (Zipf) frequencies), with labels from a planted
// model, so that a model that learns can do much better than predicting the click rate:
//
//   dense features  x_f uniform in [0, 1), f < dense_features
//   bags            per table, a length uniform in [min_bag_length, max_bag_length], then that many
//                   indices drawn with P(k-th most frequent row) ∝ 1 / (k + 1)^zipf_exponent; the k-th
//                   most frequent row is row (k · 2654435761) mod rows, so hot rows spread over the
//                   table (and over the ranks of a table cut by rows) — except where rows divides
//                   2654435760 (2–6, 8, 10, 12, 15, 16, 17, 20, 24, …): there the step is 1 and the hot
//                   rows are rows 0, 1, 2, …
//   label           1 with probability σ(signal · z), where z = (Σ_f w_f (x_f − ½) √12 + Σ_t mean of
//                   s_t over table t's bag) / √((1 + tables) / 3), with planted weights w_f and row
//                   scores s_t(row), each uniform in [−1, 1)
// Every value is a hash of (seed, stream, sample, …) (core/counter_random.hpp), so any rank makes any
// sample's features alone: a rank makes its own samples' dense features and labels, and, for the
// tables it holds, the bags of the whole global batch (DLRM's model-parallel input). Streams keep
// training and held-out samples apart.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "shardwise/core/counter_random.hpp"
#include "shardwise/core/error.hpp"
#include "shardwise/model/dlrm_batch.hpp"

namespace shardwise::data {

struct dlrm_data_config {
  std::int64_t dense_features = 13;
  std::vector<std::int64_t> table_rows;
  std::int64_t min_bag_length = 1;
  std::int64_t max_bag_length = 10;
  double zipf_exponent = 1.05;
  double signal = 4.0;  // the planted logit's scale: larger, labels nearer to certain
  std::uint64_t seed = 1;
};

enum class dlrm_stream : std::uint64_t { training = 1, held_out = 2 };

class dlrm_generator {
 public:
  explicit dlrm_generator(dlrm_data_config config) : config_(std::move(config)) {
    if (config_.dense_features < 0 || config_.min_bag_length < 0 || config_.max_bag_length < config_.min_bag_length ||
        !(config_.zipf_exponent >= 0))  // NaN too: it would draw the last row every time
      throw argument_error(
          -1, "data::dlrm_generator",
          "needs dense_features >= 0, 0 <= min_bag_length <= max_bag_length and zipf_exponent >= 0; got " +
              std::to_string(config_.dense_features) + ", " + std::to_string(config_.min_bag_length) + ", " +
              std::to_string(config_.max_bag_length) + ", " + std::to_string(config_.zipf_exponent));
    for (const auto rows : config_.table_rows) {
      if (rows < 1) throw argument_error(-1, "data::dlrm_generator", "a table of " + std::to_string(rows) + " rows");
      // The Zipf distribution's cumulative weights, normalised at the end.
      auto& cdf = cumulative_.emplace_back(static_cast<std::size_t>(rows));
      double sum = 0;
      for (std::int64_t k = 0; k < rows; ++k)
        cdf[static_cast<std::size_t>(k)] = sum += std::pow(static_cast<double>(k + 1), -config_.zipf_exponent);
      for (auto& c : cdf) c /= sum;
    }
  }

  [[nodiscard]] const dlrm_data_config& config() const noexcept { return config_; }
  [[nodiscard]] int tables() const noexcept { return static_cast<int>(config_.table_rows.size()); }

  [[nodiscard]] double dense(dlrm_stream stream, std::int64_t sample, std::int64_t feature) const {
    return draw(stream, sample, 0, feature);
  }
  [[nodiscard]] std::int64_t bag_length(dlrm_stream stream, std::int64_t sample, int table) const {
    const auto span = config_.max_bag_length - config_.min_bag_length + 1;
    return config_.min_bag_length +
           static_cast<std::int64_t>(draw(stream, sample, 1 + table, -1) * static_cast<double>(span));
  }
  [[nodiscard]] std::int64_t index(dlrm_stream stream, std::int64_t sample, int table, std::int64_t i) const {
    const auto& cdf = cumulative_[static_cast<std::size_t>(table)];
    const auto k = static_cast<std::int64_t>(
        std::upper_bound(cdf.begin(), cdf.end() - 1, draw(stream, sample, 1 + table, i)) - cdf.begin());
    const auto rows = static_cast<std::uint64_t>(cdf.size());
    return static_cast<std::int64_t>((static_cast<std::uint64_t>(k) * 2654435761ULL) % rows);
  }
  // The planted model's click probability for a sample.
  [[nodiscard]] double click_probability(dlrm_stream stream, std::int64_t sample) const {
    double z = 0;
    for (std::int64_t f = 0; f < config_.dense_features; ++f)
      z += planted(0, f) * (dense(stream, sample, f) - 0.5) * std::sqrt(12.0);
    for (int t = 0; t < tables(); ++t) {
      const auto length = bag_length(stream, sample, t);
      double sum = 0;
      for (std::int64_t i = 0; i < length; ++i) sum += planted(1 + t, index(stream, sample, t, i));
      if (length > 0) z += sum / static_cast<double>(length);
    }
    z *= config_.signal / std::sqrt((1.0 + tables()) / 3.0);
    return 1 / (1 + std::exp(-z));
  }
  [[nodiscard]] int label(dlrm_stream stream, std::int64_t sample) const {
    return draw(stream, sample, -1, -1) < click_probability(stream, sample) ? 1 : 0;
  }

  // This rank's part of the batch of `global_batch` samples from `first_sample` on: its rows' dense
  // features and labels, and the bags of the whole batch for `tables`.
  template <class T>
  [[nodiscard]] model::dlrm_batch<T> batch(dlrm_stream stream, std::int64_t first_sample, std::int64_t global_batch,
                                           std::int64_t first_row, std::int64_t rows,
                                           std::span<const int> tables) const {
    model::dlrm_batch<T> out;
    out.first_row = first_row;
    out.rows = rows;
    for (std::int64_t s = first_sample + first_row; s < first_sample + first_row + rows; ++s) {
      for (std::int64_t f = 0; f < config_.dense_features; ++f)
        out.dense.push_back(static_cast<T>(dense(stream, s, f)));
      out.labels.push_back(static_cast<T>(label(stream, s)));
    }
    for (const int t : tables) {
      auto& bags = out.sparse.emplace_back();
      for (std::int64_t s = first_sample; s < first_sample + global_batch; ++s) {
        const auto length = bag_length(stream, s, t);
        for (std::int64_t i = 0; i < length; ++i) bags.indices.push_back(index(stream, s, t, i));
        bags.offsets.push_back(static_cast<std::int64_t>(bags.indices.size()));
      }
    }
    return out;
  }

 private:
  // A uniform value in [0, 1) for (stream, sample, what, which).
  [[nodiscard]] double draw(dlrm_stream stream, std::int64_t sample, std::int64_t what, std::int64_t which) const {
    const std::uint64_t key = splitmix64(config_.seed ^ splitmix64(static_cast<std::uint64_t>(stream)));
    return uniform_at(splitmix64(key ^ static_cast<std::uint64_t>(sample)), what, which);
  }
  // The planted model's weights: part 0 the dense features', part 1 + t table t's row scores.
  [[nodiscard]] double planted(std::int64_t part, std::int64_t which) const {
    return 2 * uniform_at(splitmix64(config_.seed) ^ 0x706c616e74ULL, part, which) - 1;
  }

  dlrm_data_config config_;
  std::vector<std::vector<double>> cumulative_;  // per table, the Zipf distribution's CDF
};

}  // namespace shardwise::data
