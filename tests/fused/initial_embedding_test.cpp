// fused::initial_embedding, a table's starting values, against its comment: uniform in ±√(1/rows) (every
// value inside, the extremes near both ends, mean 0 and variance bound²/3 within 6 standard errors, for
// tables of 1 to 4096 rows, in double and float), and other tables and other seeds drawing other values.
// The DLRM's serial test reference draws its tables with this function, so a bug in it is invisible to
// the DLRM's tests; that a layer's pieces hold these values however the table is cut is the embedding
// bag's test (embedding_bag_test.cpp, on 1, 3 and 8 ranks).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "shardwise/fused/embedding_bag.hpp"

namespace {

using namespace shardwise;

constexpr double allowed_standard_errors = 6;

// A table's values, row-major.
template <class T>
std::vector<T> table_values(std::uint64_t seed, int table, std::int64_t rows, int dimension) {
  std::vector<T> values;
  for (std::int64_t row = 0; row < rows; ++row)
    for (int column = 0; column < dimension; ++column)
      values.push_back(fused::initial_embedding<T>(seed, table, rows, row, column));
  return values;
}

TEST(initial_embedding, is_uniform_within_the_square_root_of_one_over_the_rows) {
  for (const auto& [rows, dimension] : {std::pair<std::int64_t, int>{1, 4096}, {7, 1000}, {1000, 64}, {4096, 64}}) {
    const double bound = std::sqrt(1.0 / static_cast<double>(rows));
    const std::string what = std::to_string(rows) + " rows";
    const auto values = table_values<double>(5, 2, rows, dimension);
    double sum = 0, square_sum = 0, low = 0, high = 0;
    for (const double v : values) {
      ASSERT_TRUE(v >= -bound && v <= bound) << what << ": " << v << " outside ±" << bound;
      sum += v, square_sum += v * v, low = std::min(low, v), high = std::max(high, v);
    }
    EXPECT_LT(low, -0.99 * bound) << what;
    EXPECT_GT(high, 0.99 * bound) << what;
    // Uniform in ±b: mean 0, variance b²/3; a square's variance b⁴/5 − b⁴/9 = 4b⁴/45.
    const double n = static_cast<double>(values.size());
    EXPECT_NEAR(sum / n, 0, allowed_standard_errors * bound * std::sqrt(1.0 / 3 / n)) << what;
    EXPECT_NEAR(square_sum / n, bound * bound / 3, allowed_standard_errors * bound * bound * std::sqrt(4.0 / 45 / n))
        << what;
    const auto in_float = table_values<float>(5, 2, rows, dimension);
    for (std::size_t i = 0; i < values.size(); ++i)
      ASSERT_EQ(in_float[i], static_cast<float>(values[i])) << what << ", value " << i;
  }
}

// Five tables of one size, and table 0 under three seeds: no two share a value at any (row, column).
// Tables of other sizes, compared as fractions of their bounds, do not either. The seeds are far apart:
// the key is seed + table, so table t + 1 under seed s is table t under seed s + 1.
TEST(initial_embedding, other_tables_and_other_seeds_draw_other_values) {
  constexpr std::int64_t rows = 500;
  constexpr int dimension = 16;
  std::vector<std::pair<std::string, std::vector<double>>> drawn;
  for (int table = 0; table < 5; ++table)
    drawn.emplace_back("table " + std::to_string(table), table_values<double>(5, table, rows, dimension));
  for (const std::uint64_t seed : {1005ULL, 77777ULL})
    drawn.emplace_back("seed " + std::to_string(seed), table_values<double>(seed, 0, rows, dimension));
  for (const auto& [table, other_rows] : {std::pair<int, std::int64_t>{5, rows + 1}, {6, 4 * rows}}) {
    auto values = table_values<double>(5, table, other_rows, dimension);
    values.resize(rows * dimension);
    for (auto& v : values) v *= std::sqrt(static_cast<double>(other_rows) / rows);
    drawn.emplace_back("table " + std::to_string(table) + " of " + std::to_string(other_rows) + " rows", values);
  }
  for (std::size_t a = 0; a < drawn.size(); ++a)
    for (std::size_t b = a + 1; b < drawn.size(); ++b) {
      std::int64_t equal = 0;
      for (std::size_t i = 0; i < drawn[a].second.size(); ++i)
        equal += std::abs(drawn[a].second[i] - drawn[b].second[i]) < 1e-12 ? 1 : 0;
      EXPECT_EQ(equal, 0) << drawn[a].first << " and " << drawn[b].first;
    }
}

}  // namespace
