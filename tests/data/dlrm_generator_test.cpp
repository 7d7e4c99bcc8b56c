// data::dlrm_generator against its header comment, each property computed here from the documentation
// alone: the values' ranges; bag lengths uniform over [min, max]; every row drawn at its Zipf frequency
// under the documented row permutation, in tables of different sizes, at three exponents; tables whose
// bags are drawn apart; batch() cut over ranks against the one-rank batch; values keyed by (seed,
// stream, sample); labels 1 as often as their click probabilities; the planted model's logit; and the
// errors. The DLRM's own tests cannot see a generator bug, as their serial reference reads the same
// generator. The statistical checks draw fixed samples and allow 6 standard errors: they cannot flake,
// and each bug put in on purpose (a bag one lookup short, every table drawing table 0's bags, another
// permutation, the exponent ignored, ...) failed one of them (docs/reliability.md).
#include "shardwise/data/dlrm_generator.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "support/messages.hpp"

namespace {

using namespace shardwise;
using data::dlrm_data_config;
using data::dlrm_generator;
using data::dlrm_stream;
using shardwise::testing::message_of;
using bags = model::dlrm_batch<double>::bags;

constexpr double allowed_standard_errors = 6;

// Every table's bags of samples [first_sample, first_sample + samples) of a stream, and no rows.
std::vector<bags> bags_of(const dlrm_generator& generator, std::int64_t samples, dlrm_stream stream,
                          std::int64_t first_sample = 0) {
  std::vector<int> tables;
  for (int t = 0; t < generator.tables(); ++t) tables.push_back(t);
  return generator.batch<double>(stream, first_sample, samples, 0, 0, tables).sparse;
}

std::int64_t length_of(const bags& b, std::int64_t sample) {
  return b.offsets[static_cast<std::size_t>(sample) + 1] - b.offsets[static_cast<std::size_t>(sample)];
}

// Of the i-th lookups that two sets of bags both have, how many, and how many name the same row.
std::pair<std::int64_t, std::int64_t> lookups_and_equal_lookups(const bags& a, const bags& b, std::int64_t samples) {
  std::int64_t lookups = 0, equal = 0;
  for (std::int64_t s = 0; s < samples; ++s) {
    const auto from_a = a.indices.begin() + a.offsets[static_cast<std::size_t>(s)];
    const auto from_b = b.indices.begin() + b.offsets[static_cast<std::size_t>(s)];
    for (std::int64_t i = 0; i < std::min(length_of(a, s), length_of(b, s)); ++i, ++lookups)
      equal += from_a[i] == from_b[i] ? 1 : 0;
  }
  return {lookups, equal};
}

// The documentation's index law: P(k-th most frequent row) ∝ 1 / (k + 1)^exponent, the k-th most
// frequent row being (k · 2654435761) mod rows. Per row, its probability.
std::vector<double> zipf_probabilities(std::int64_t rows, double exponent) {
  std::vector<double> of_rank(static_cast<std::size_t>(rows));
  double sum = 0;
  for (std::int64_t k = 0; k < rows; ++k) sum += of_rank[static_cast<std::size_t>(k)] = std::pow(k + 1.0, -exponent);
  std::vector<double> of_row(static_cast<std::size_t>(rows), -1);
  for (std::int64_t k = 0; k < rows; ++k) {
    const auto row =
        static_cast<std::size_t>(static_cast<std::uint64_t>(k) * 2654435761ULL % static_cast<std::uint64_t>(rows));
    EXPECT_EQ(of_row[row], -1) << "the permutation gives row " << row << " twice in a table of " << rows;
    of_row[row] = of_rank[static_cast<std::size_t>(k)] / sum;
  }
  return of_row;
}

// `count` of `draws` within the allowed standard errors of a probability p's expectation.
void expect_frequency(std::int64_t count, std::int64_t draws, double p, const std::string& what) {
  const double n = static_cast<double>(draws);
  const double standard_error = std::sqrt(n * p * (1 - p));
  EXPECT_LE(std::abs(static_cast<double>(count) - n * p), allowed_standard_errors * standard_error + 1e-9)
      << what << ": " << count << " of " << draws << ", expected " << n * p << " ± " << standard_error;
}

dlrm_data_config config_of(std::vector<std::int64_t> table_rows) {
  dlrm_data_config config;
  config.table_rows = std::move(table_rows);
  return config;
}

TEST(dlrm_generator, dense_features_labels_and_indices_are_in_their_ranges) {
  auto config = config_of({1000, 97, 1});
  config.dense_features = 5;
  const dlrm_generator generator(config);
  constexpr std::int64_t samples = 2000;
  const auto batch = generator.batch<double>(dlrm_stream::training, 0, samples, 0, samples, std::vector<int>{0, 1, 2});
  ASSERT_EQ(batch.dense.size(), static_cast<std::size_t>(samples * config.dense_features));
  ASSERT_EQ(batch.labels.size(), static_cast<std::size_t>(samples));
  double dense_sum = 0, low = 1, high = 0;
  for (const double x : batch.dense) {
    EXPECT_TRUE(x >= 0 && x < 1) << x;
    dense_sum += x, low = std::min(low, x), high = std::max(high, x);
  }
  // Uniform in [0, 1): mean ½, standard error √(1/12 / n); the extremes near the ends.
  const double n = static_cast<double>(batch.dense.size());
  EXPECT_NEAR(dense_sum / n, 0.5, allowed_standard_errors * std::sqrt(1.0 / 12 / n));
  EXPECT_LT(low, 0.01);
  EXPECT_GT(high, 0.99);
  for (const double label : batch.labels) EXPECT_TRUE(label == 0 || label == 1) << label;
  for (std::size_t t = 0; t < batch.sparse.size(); ++t)
    for (const auto index : batch.sparse[t].indices)
      EXPECT_TRUE(index >= 0 && index < config.table_rows[t]) << "table " << t << ", index " << index;
}

// Read off batch()'s offsets, what the model reads: a bag one lookup short shows here.
TEST(dlrm_generator, bag_lengths_are_uniform_over_min_to_max) {
  auto config = config_of({50, 7, 1000});
  config.min_bag_length = 2;
  config.max_bag_length = 6;
  const dlrm_generator generator(config);
  constexpr std::int64_t samples = 20000;
  const auto all = bags_of(generator, samples, dlrm_stream::training);
  const auto lengths = config.max_bag_length - config.min_bag_length + 1;
  for (int t = 0; t < generator.tables(); ++t) {
    const auto& b = all[static_cast<std::size_t>(t)];
    std::map<std::int64_t, std::int64_t> count;
    for (std::int64_t s = 0; s < samples; ++s) {
      ++count[length_of(b, s)];
      EXPECT_EQ(length_of(b, s), generator.bag_length(dlrm_stream::training, s, t))
          << "table " << t << ", sample " << s;
    }
    for (const auto& [length, n] : count)
      EXPECT_TRUE(length >= config.min_bag_length && length <= config.max_bag_length)
          << "table " << t << ": " << n << " bags of length " << length;
    for (auto length = config.min_bag_length; length <= config.max_bag_length; ++length)
      expect_frequency(count[length], samples, 1.0 / static_cast<double>(lengths),
                       "table " + std::to_string(t) + ", bags of length " + std::to_string(length));
  }
}

TEST(dlrm_generator, bags_of_a_fixed_length_and_empty_bags) {
  for (const std::int64_t length : {0, 3}) {
    auto config = config_of({20, 5});
    config.min_bag_length = config.max_bag_length = length;
    const dlrm_generator generator(config);
    constexpr std::int64_t samples = 50;
    for (const auto& b : bags_of(generator, samples, dlrm_stream::held_out)) {
      ASSERT_EQ(b.offsets.size(), static_cast<std::size_t>(samples + 1));
      for (std::int64_t s = 0; s <= samples; ++s) EXPECT_EQ(b.offsets[static_cast<std::size_t>(s)], s * length);
      EXPECT_EQ(b.indices.size(), static_cast<std::size_t>(samples * length));
    }
    // Empty bags take no part in the label: its probability is still a probability.
    for (std::int64_t s = 0; s < samples; ++s) {
      const double p = generator.click_probability(dlrm_stream::held_out, s);
      EXPECT_TRUE(p > 0 && p < 1) << "sample " << s << ": " << p;
    }
  }
}

// Every row's frequency against the documented law, in tables of 1000 (whose permutation steps by
// 761), 97 (by 12) and 1 rows, at DLRM's exponent and a steeper one.
TEST(dlrm_generator, indices_follow_the_zipf_law_over_the_documented_row_permutation) {
  for (const double exponent : {1.05, 2.0}) {
    auto config = config_of({1000, 97, 1});
    config.min_bag_length = 0;
    config.max_bag_length = 8;
    config.zipf_exponent = exponent;
    const dlrm_generator generator(config);
    const auto all = bags_of(generator, 50000, dlrm_stream::training);
    for (int t = 0; t < generator.tables(); ++t) {
      const auto rows = config.table_rows[static_cast<std::size_t>(t)];
      const auto& indices = all[static_cast<std::size_t>(t)].indices;
      const auto draws = static_cast<std::int64_t>(indices.size());
      ASSERT_GT(draws, 150000);
      std::vector<std::int64_t> count(static_cast<std::size_t>(rows));
      for (const auto i : indices) ++count[static_cast<std::size_t>(i)];
      const auto expected = zipf_probabilities(rows, exponent);
      for (std::int64_t row = 0; row < rows; ++row)
        expect_frequency(count[static_cast<std::size_t>(row)], draws, expected[static_cast<std::size_t>(row)],
                         "exponent " + std::to_string(exponent) + ", table " + std::to_string(t) + " of " +
                             std::to_string(rows) + " rows, row " + std::to_string(row));
    }
  }
}

TEST(dlrm_generator, exponent_zero_draws_every_row_alike) {
  auto config = config_of({97, 13});
  config.zipf_exponent = 0;
  const dlrm_generator generator(config);
  const auto all = bags_of(generator, 20000, dlrm_stream::training);
  for (int t = 0; t < generator.tables(); ++t) {
    const auto rows = config.table_rows[static_cast<std::size_t>(t)];
    const auto& indices = all[static_cast<std::size_t>(t)].indices;
    std::vector<std::int64_t> count(static_cast<std::size_t>(rows));
    for (const auto i : indices) ++count[static_cast<std::size_t>(i)];
    for (std::int64_t row = 0; row < rows; ++row)
      expect_frequency(count[static_cast<std::size_t>(row)], static_cast<std::int64_t>(indices.size()),
                       1.0 / static_cast<double>(rows), "table " + std::to_string(t) + ", row " + std::to_string(row));
  }
}

// Tables of the same size draw their bags apart: two tables' bags are as often of one length, and
// their i-th lookups as often the same row, as two independent draws (1 / lengths and Σ p(row)²), not
// always. A table of another size, compared by lengths only.
TEST(dlrm_generator, tables_draw_their_bags_independently) {
  auto config = config_of({200, 200, 200, 31});
  const dlrm_generator generator(config);
  constexpr std::int64_t samples = 20000;
  const auto all = bags_of(generator, samples, dlrm_stream::training);
  const double same_length = 1.0 / static_cast<double>(config.max_bag_length - config.min_bag_length + 1);
  double same_row = 0;
  for (const double p : zipf_probabilities(200, config.zipf_exponent)) same_row += p * p;
  for (int a = 0; a < generator.tables(); ++a)
    for (int b = a + 1; b < generator.tables(); ++b) {
      const auto& first = all[static_cast<std::size_t>(a)];
      const auto& second = all[static_cast<std::size_t>(b)];
      const std::string tables = "tables " + std::to_string(a) + " and " + std::to_string(b);
      std::int64_t equal_lengths = 0;
      for (std::int64_t s = 0; s < samples; ++s) equal_lengths += length_of(first, s) == length_of(second, s) ? 1 : 0;
      expect_frequency(equal_lengths, samples, same_length, tables + ", bags of one length");
      if (config.table_rows[static_cast<std::size_t>(b)] == 200) {
        const auto [lookups, equal_lookups] = lookups_and_equal_lookups(first, second, samples);
        expect_frequency(equal_lookups, lookups, same_row, tables + ", i-th lookups of one row");
      }
    }
}

// A global batch cut over ranks as the DLRM cuts it (a rank with no samples too): the ranks' dense
// features and labels, in order, are the one-rank batch's; every rank has the whole batch's bags of
// the tables it asks for, in the order it asks; the offsets delimit each sample's bag.
TEST(dlrm_generator, a_batch_cut_over_ranks_is_the_one_rank_batch) {
  auto config = config_of({30, 1000, 5});
  config.dense_features = 4;
  config.min_bag_length = 0;
  const dlrm_generator generator(config);
  constexpr std::int64_t first_sample = 1000, global_batch = 23;
  const std::vector<int> every_table{0, 1, 2};
  const auto whole =
      generator.batch<double>(dlrm_stream::training, first_sample, global_batch, 0, global_batch, every_table);
  ASSERT_EQ(whole.sparse.size(), every_table.size());
  for (std::size_t t = 0; t < whole.sparse.size(); ++t) {
    const auto& b = whole.sparse[t];
    ASSERT_EQ(b.offsets.size(), static_cast<std::size_t>(global_batch + 1)) << "table " << t;
    EXPECT_EQ(b.offsets.front(), 0);
    EXPECT_EQ(b.offsets.back(), static_cast<std::int64_t>(b.indices.size()));
    for (std::int64_t s = 0; s < global_batch; ++s) {
      const auto sample = first_sample + s;
      ASSERT_EQ(length_of(b, s), generator.bag_length(dlrm_stream::training, sample, static_cast<int>(t)));
      for (std::int64_t i = 0; i < length_of(b, s); ++i)
        EXPECT_EQ(b.indices[static_cast<std::size_t>(b.offsets[static_cast<std::size_t>(s)] + i)],
                  generator.index(dlrm_stream::training, sample, static_cast<int>(t), i))
            << "table " << t << ", sample " << sample << ", lookup " << i;
    }
  }
  for (std::int64_t s = 0; s < global_batch; ++s) {
    for (std::int64_t f = 0; f < config.dense_features; ++f)
      EXPECT_EQ(whole.dense[static_cast<std::size_t>(s * config.dense_features + f)],
                generator.dense(dlrm_stream::training, first_sample + s, f));
    EXPECT_EQ(whole.labels[static_cast<std::size_t>(s)], generator.label(dlrm_stream::training, first_sample + s));
  }

  const std::vector<std::pair<std::int64_t, std::int64_t>> ranks = {{0, 5}, {5, 7}, {12, 0}, {12, 11}};
  const std::vector<std::vector<int>> tables_of_rank = {{0, 1, 2}, {2, 0}, {1}, {}};
  std::vector<double> dense, labels;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const auto [first_row, rows] = ranks[r];
    const auto& tables = tables_of_rank[r];
    const auto part =
        generator.batch<double>(dlrm_stream::training, first_sample, global_batch, first_row, rows, tables);
    EXPECT_EQ(part.first_row, first_row);
    EXPECT_EQ(part.rows, rows);
    EXPECT_EQ(part.labels.size(), static_cast<std::size_t>(rows));
    dense.insert(dense.end(), part.dense.begin(), part.dense.end());
    labels.insert(labels.end(), part.labels.begin(), part.labels.end());
    ASSERT_EQ(part.sparse.size(), tables.size()) << "rank " << r;
    for (std::size_t i = 0; i < tables.size(); ++i) {
      EXPECT_EQ(part.sparse[i].offsets, whole.sparse[static_cast<std::size_t>(tables[i])].offsets)
          << "rank " << r << ", table " << tables[i];
      EXPECT_EQ(part.sparse[i].indices, whole.sparse[static_cast<std::size_t>(tables[i])].indices)
          << "rank " << r << ", table " << tables[i];
    }
  }
  EXPECT_EQ(dense, whole.dense);
  EXPECT_EQ(labels, whole.labels);

  // In float, the same values rounded.
  const auto in_float =
      generator.batch<float>(dlrm_stream::training, first_sample, global_batch, 5, 7, std::vector<int>{1});
  for (std::size_t i = 0; i < in_float.dense.size(); ++i)
    EXPECT_EQ(in_float.dense[i], static_cast<float>(whole.dense[5 * 4 + i]));
  EXPECT_EQ(in_float.sparse[0].indices, whole.sparse[1].indices);
}

// A sample is the same whichever batch makes it: samples 1005 to 1014 alone are rows 5 to 14 of the
// batch from 1000, bags included.
TEST(dlrm_generator, a_sample_is_the_same_in_any_batch) {
  auto config = config_of({64, 9});
  config.dense_features = 3;
  const dlrm_generator generator(config);
  const std::vector<int> tables{0, 1};
  const auto large = generator.batch<double>(dlrm_stream::held_out, 1000, 20, 0, 20, tables);
  const auto small = generator.batch<double>(dlrm_stream::held_out, 1005, 10, 0, 10, tables);
  EXPECT_EQ(small.dense, std::vector<double>(large.dense.begin() + 5 * 3, large.dense.begin() + 15 * 3));
  EXPECT_EQ(small.labels, std::vector<double>(large.labels.begin() + 5, large.labels.begin() + 15));
  for (std::size_t t = 0; t < tables.size(); ++t) {
    const auto& l = large.sparse[t];
    const auto& s = small.sparse[t];
    for (std::int64_t b = 0; b < 10; ++b) {
      const auto from = static_cast<std::size_t>(l.offsets[static_cast<std::size_t>(b) + 5]);
      EXPECT_EQ(std::vector<std::int64_t>(s.indices.begin() + s.offsets[static_cast<std::size_t>(b)],
                                          s.indices.begin() + s.offsets[static_cast<std::size_t>(b) + 1]),
                std::vector<std::int64_t>(l.indices.begin() + static_cast<std::ptrdiff_t>(from),
                                          l.indices.begin() + static_cast<std::ptrdiff_t>(from) + length_of(s, b)))
          << "table " << t << ", sample " << 1005 + b;
    }
  }
}

// Two generators of one config make the same values; another stream or another seed makes others:
// no dense feature in common, and labels and lookups alike no more often than independent draws.
TEST(dlrm_generator, values_are_keyed_by_seed_stream_and_sample) {
  auto config = config_of({100, 100});
  config.dense_features = 8;
  config.seed = 7;
  constexpr std::int64_t samples = 4000;
  const std::vector<int> tables{0, 1};
  const dlrm_generator generator(config);
  const auto reference = generator.batch<double>(dlrm_stream::training, 0, samples, 0, samples, tables);
  const auto again = dlrm_generator(config).batch<double>(dlrm_stream::training, 0, samples, 0, samples, tables);
  EXPECT_EQ(again.dense, reference.dense);
  EXPECT_EQ(again.labels, reference.labels);
  for (std::size_t t = 0; t < tables.size(); ++t) {
    EXPECT_EQ(again.sparse[t].offsets, reference.sparse[t].offsets);
    EXPECT_EQ(again.sparse[t].indices, reference.sparse[t].indices);
  }
  double same_row = 0;
  for (const double p : zipf_probabilities(100, config.zipf_exponent)) same_row += p * p;
  for (const auto& [seed, stream, what] : {std::tuple{8ULL, dlrm_stream::training, "seed 8"},
                                           std::tuple{7ULL, dlrm_stream::held_out, "the held-out stream"}}) {
    auto other_config = config;
    other_config.seed = seed;
    const dlrm_generator other_generator(other_config);
    const auto other = other_generator.batch<double>(stream, 0, samples, 0, samples, tables);
    std::int64_t equal_dense = 0;
    for (std::size_t i = 0; i < other.dense.size(); ++i) equal_dense += other.dense[i] == reference.dense[i] ? 1 : 0;
    EXPECT_EQ(equal_dense, 0) << what;
    // Two independent labels of probabilities p and q agree with probability pq + (1 − p)(1 − q).
    double agreements = 0, variance = 0;
    std::int64_t equal_labels = 0;
    for (std::int64_t s = 0; s < samples; ++s) {
      const double p = generator.click_probability(dlrm_stream::training, s);
      const double q = other_generator.click_probability(stream, s);
      const double agree = p * q + (1 - p) * (1 - q);
      agreements += agree, variance += agree * (1 - agree);
      equal_labels +=
          other.labels[static_cast<std::size_t>(s)] == reference.labels[static_cast<std::size_t>(s)] ? 1 : 0;
    }
    EXPECT_LE(std::abs(static_cast<double>(equal_labels) - agreements), allowed_standard_errors * std::sqrt(variance))
        << what << ": " << equal_labels << " labels alike, expected " << agreements;
    for (std::size_t t = 0; t < tables.size(); ++t) {
      const auto [lookups, equal_lookups] = lookups_and_equal_lookups(other.sparse[t], reference.sparse[t], samples);
      expect_frequency(equal_lookups, lookups, same_row, std::string(what) + ", table " + std::to_string(t));
    }
  }
}

// Samples grouped by their click probability: in each group, the labels that are 1 within 6 standard
// errors of the probabilities' sum, as they are over all samples.
TEST(dlrm_generator, labels_are_one_as_often_as_their_click_probability) {
  auto config = config_of({1000, 97, 20});
  const dlrm_generator generator(config);
  constexpr std::int64_t samples = 40000;
  constexpr int groups = 10;
  std::vector<double> probability_sum(groups + 1), variance_sum(groups + 1);
  std::vector<std::int64_t> ones(groups + 1), in_group(groups + 1);
  for (std::int64_t s = 0; s < samples; ++s) {
    const double p = generator.click_probability(dlrm_stream::training, s);
    const int label = generator.label(dlrm_stream::training, s);
    ASSERT_TRUE(p > 0 && p < 1) << p;
    for (const int g : {static_cast<int>(p * groups), groups}) {  // its group, and all samples
      probability_sum[g] += p, variance_sum[g] += p * (1 - p), ones[g] += label, ++in_group[g];
    }
  }
  for (int g = 0; g <= groups; ++g) {
    const std::string what = g == groups ? "all samples" : "probabilities from " + std::to_string(g * 0.1);
    if (g < groups) {
      EXPECT_GT(in_group[g], 500) << what << ": signal 4 spreads the probabilities over (0, 1)";
    }
    EXPECT_LE(std::abs(static_cast<double>(ones[g]) - probability_sum[g]),
              allowed_standard_errors * std::sqrt(variance_sum[g]))
        << what << ": " << ones[g] << " labels 1 of " << in_group[g] << ", expected " << probability_sum[g];
  }
}

TEST(dlrm_generator, signal_zero_clicks_with_probability_one_half) {
  auto config = config_of({1000, 97});
  config.signal = 0;
  const dlrm_generator generator(config);
  constexpr std::int64_t samples = 20000;
  std::int64_t ones = 0;
  for (std::int64_t s = 0; s < samples; ++s) {
    EXPECT_EQ(generator.click_probability(dlrm_stream::training, s), 0.5);
    ones += generator.label(dlrm_stream::training, s);
  }
  expect_frequency(ones, samples, 0.5, "labels 1");
}

// The planted model, its weights read back where the documentation leaves one unknown: with one dense
// feature and no tables, logit p = signal · w (x − ½) √12 / √(1/3) for every sample; with one table of
// one row and no dense features, logit p = signal · s / √(2/3) for every non-empty bag (the mean of s
// over a bag is s whatever its length) and p = ½ for an empty one. Over 1000 seeds the w and the s read
// back are uniform in [−1, 1): all inside it, mean 0 and mean square ⅓ within 6 standard errors (a z
// left unscaled by √((1 + tables) / 3) gives mean squares of 1/9 and 2/9), whatever the signal.
TEST(dlrm_generator, the_planted_model_is_the_documented_logit) {
  constexpr int seeds = 1000;
  const auto logit = [](double p) { return std::log(p / (1 - p)); };
  // The value a seed's samples all read back, each within 1e-9 of the first.
  const auto one_value = [](const std::vector<double>& read_back, std::uint64_t seed) {
    EXPECT_FALSE(read_back.empty()) << "seed " << seed;
    for (const double value : read_back) EXPECT_NEAR(value, read_back.front(), 1e-9) << "seed " << seed;
    return read_back.empty() ? 0.0 : read_back.front();
  };
  const auto weight_read_back = [&](std::uint64_t seed, double signal) {
    auto config = config_of({});
    config.dense_features = 1;
    config.signal = signal;
    config.seed = seed;
    const dlrm_generator generator(config);
    std::vector<double> weights;
    for (std::int64_t s = 0; s < 20; ++s) {
      const double centred = generator.dense(dlrm_stream::training, s, 0) - 0.5;
      if (std::abs(centred) < 0.01) continue;  // the logit too near 0 to divide by
      weights.push_back(logit(generator.click_probability(dlrm_stream::training, s)) /
                        (signal * centred * std::sqrt(12.0) / std::sqrt(1.0 / 3)));
    }
    return one_value(weights, seed);
  };
  const auto score_read_back = [&](std::uint64_t seed, double signal) {
    auto config = config_of({1});
    config.dense_features = 0;
    config.min_bag_length = 0;
    config.max_bag_length = 4;
    config.signal = signal;
    config.seed = seed;
    const dlrm_generator generator(config);
    std::vector<double> scores;
    for (std::int64_t s = 0; s < 20; ++s) {
      const double p = generator.click_probability(dlrm_stream::training, s);
      if (generator.bag_length(dlrm_stream::training, s, 0) == 0) {
        EXPECT_EQ(p, 0.5) << "seed " << seed << ", sample " << s << ", an empty bag";
      } else {
        scores.push_back(logit(p) / signal * std::sqrt(2.0 / 3));
      }
    }
    return one_value(scores, seed);
  };
  const auto expect_uniform = [&](const auto& read_back, const std::string& what) {
    double sum = 0, square_sum = 0;
    for (std::uint64_t seed = 1; seed <= seeds; ++seed) {
      const double value = read_back(seed, 3.0);
      EXPECT_NEAR(read_back(seed, 1.0), value, 1e-9) << what << ", seed " << seed << ", signal 1 against 3";
      EXPECT_TRUE(value >= -1 && value < 1) << what << ", seed " << seed << ": " << value;
      sum += value, square_sum += value * value;
    }
    // A uniform value in [−1, 1): variance ⅓; its square's variance 1/5 − 1/9 = 4/45.
    EXPECT_NEAR(sum / seeds, 0, allowed_standard_errors * std::sqrt(1.0 / 3 / seeds)) << what;
    EXPECT_NEAR(square_sum / seeds, 1.0 / 3, allowed_standard_errors * std::sqrt(4.0 / 45 / seeds)) << what;
  };
  expect_uniform(weight_read_back, "the dense feature's weight");
  expect_uniform(score_read_back, "the row's score");
}

TEST(dlrm_generator, invalid_configs_are_refused_naming_their_values) {
  const auto refusal = [](const auto& change) {
    auto config = config_of({10, 20});
    change(config);
    return message_of<argument_error>([&] { (void)dlrm_generator(config); });
  };
  const std::string needs =
      "[no rank] data::dlrm_generator: needs dense_features >= 0, 0 <= min_bag_length <= max_bag_length and "
      "zipf_exponent >= 0; got ";
  EXPECT_EQ(refusal([](dlrm_data_config& c) { c.dense_features = -1; }), needs + "-1, 1, 10, 1.050000");
  EXPECT_EQ(refusal([](dlrm_data_config& c) { c.min_bag_length = -2; }), needs + "13, -2, 10, 1.050000");
  EXPECT_EQ(refusal([](dlrm_data_config& c) { c.min_bag_length = 11; }), needs + "13, 11, 10, 1.050000");
  EXPECT_EQ(refusal([](dlrm_data_config& c) { c.zipf_exponent = -0.5; }), needs + "13, 1, 10, -0.500000");
  EXPECT_EQ(refusal([](dlrm_data_config& c) { c.zipf_exponent = std::nan(""); }), needs + "13, 1, 10, nan");
  EXPECT_EQ(refusal([](dlrm_data_config& c) { c.table_rows = {10, 0, 5}; }),
            "[no rank] data::dlrm_generator: a table of 0 rows");
  EXPECT_EQ(refusal([](dlrm_data_config& c) { c.table_rows = {-3}; }),
            "[no rank] data::dlrm_generator: a table of -3 rows");
}

}  // namespace
