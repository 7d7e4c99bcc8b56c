// GeLU and dropout (ops/gelu.hpp, ops/dropout.hpp), forward and backward, on every layout family and
// shapes that do not divide the grid, against serial Eigen. GeLU's formula is checked against an
// independent writing of the tanh approximation and its derivative against differences; dropout's mask
// against the serial mask of the same seed (whatever the layout and rank count), its keep rate, and its
// dependence on the seed.
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <string>
#include <utility>

#include "ops/ops_testing.hpp"
#include "shardwise/ops/dropout.hpp"
#include "shardwise/ops/gelu.hpp"
#include "support/backends.hpp"

namespace {

using namespace shardwise;
using namespace shardwise::ops_testing;

template <class Backend>
class pointwise_ops_test : public ::testing::Test {};
TYPED_TEST_SUITE(pointwise_ops_test, shardwise::testing::backends);

// Hendrycks and Gimpel's tanh approximation, as written in their paper.
double serial_gelu(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * std::pow(x, 3))));
}

// The exact form, through the normal distribution's CDF: x · Φ(x).
double serial_exact_gelu(double x) { return x * 0.5 * std::erfc(-x / std::numbers::sqrt2); }

matrix serial_dropout(const matrix& x, double rate, std::uint64_t seed) {
  matrix y(x.rows(), x.cols());
  for (std::int64_t i = 0; i < x.rows(); ++i)
    for (std::int64_t j = 0; j < x.cols(); ++j) y(i, j) = dropout_keeps(rate, seed, i, j) ? x(i, j) / (1 - rate) : 0;
  return y;
}

TYPED_TEST(pointwise_ops_test, gelu_and_dropout_match_serial_eigen) {
  TypeParam::run(
      [](auto& world) {
        for_every_family(world, [&]<class Layout>(auto& mesh, const matrix_extents& shape) {
          SCOPED_TRACE(::testing::internal::GetTypeName<Layout>());
          const matrix x_whole = 3 * random_matrix(shape, 31);
          const matrix dy_whole = random_matrix(shape, 32);
          const auto x = distribute<Layout>(mesh, x_whole);
          const auto dy = distribute<Layout>(mesh, dy_whole);

          expect_near(gelu(x), x_whole.unaryExpr(&serial_gelu), 1e-14, "gelu");
          // Central differences of the serial formula: dx = dy · gelu'(x).
          constexpr double step = 1e-6;
          const matrix slopes = (x_whole.array() + step).unaryExpr(&serial_gelu).matrix() -
                                (x_whole.array() - step).unaryExpr(&serial_gelu).matrix();
          expect_near(gelu_backward(dy, x), dy_whole.cwiseProduct(slopes / (2 * step)), 1e-8, "gelu backward");
          const auto exact = gelu_approximation::none;
          expect_near(gelu(x, exact), x_whole.unaryExpr(&serial_exact_gelu), 1e-14, "exact gelu");
          const matrix exact_slopes = (x_whole.array() + step).unaryExpr(&serial_exact_gelu).matrix() -
                                      (x_whole.array() - step).unaryExpr(&serial_exact_gelu).matrix();
          expect_near(gelu_backward(dy, x, exact), dy_whole.cwiseProduct(exact_slopes / (2 * step)), 1e-8,
                      "exact gelu backward");

          // In float, where Eigen's vectorised erf, exp and tanh stand in for the standard library's:
          // within a few units in the last place of the serial formulas at the same (rounded) inputs.
          const auto to_float = [](double v) { return static_cast<float>(v); };
          const auto to_double = [](float v) { return static_cast<double>(v); };
          const matrix x_rounded = x_whole.cast<float>().cast<double>();
          const matrix dy_rounded = dy_whole.cast<float>().cast<double>();
          const auto x_float = transform(x, to_float);
          const auto dy_float = transform(dy, to_float);
          for (const auto& [approximation, formula] :
               {std::pair{gelu_approximation::tanh, &serial_gelu}, std::pair{exact, &serial_exact_gelu}}) {
            const matrix float_slopes = (x_rounded.array() + step).unaryExpr(formula).matrix() -
                                        (x_rounded.array() - step).unaryExpr(formula).matrix();
            expect_near(transform(gelu(x_float, approximation), to_double), x_rounded.unaryExpr(formula), 2e-6,
                        "float gelu");
            expect_near(transform(gelu_backward(dy_float, x_float, approximation), to_double),
                        dy_rounded.cwiseProduct(float_slopes / (2 * step)), 2e-6, "float gelu backward");
          }

          constexpr std::uint64_t seed = 2024;
          for (const double rate : {0.0, 0.25, 0.5}) {
            SCOPED_TRACE("dropout rate " + std::to_string(rate));
            expect_near(dropout(x, rate, seed), serial_dropout(x_whole, rate, seed), 1e-15, "dropout");
            expect_near(dropout_backward(dy, rate, seed), serial_dropout(dy_whole, rate, seed), 1e-15,
                        "dropout backward");
          }
        });
      },
      rank_counts);
}

// Inputs far from zero, as activations can be: exp(-2u) of the tanh form overflows below about x = -10 in
// float and x = -21 in double unless 2u is held within bounds, and even within them, times the
// derivative's polynomial, exceeds float's range below about x = -31. There GeLU is x or 0, its slope 1
// or 0, as the serial formula gives.
TYPED_TEST(pointwise_ops_test, gelu_of_inputs_far_from_zero_is_finite) {
  TypeParam::run(
      [](auto& world) {
        process_mesh mesh(world, {world.size()});
        matrix x_whole(2, 4);
        x_whole << -300, -40, -12, -3, 3, 12, 40, 300;
        const matrix dy_whole = matrix::Ones(2, 4);
        constexpr double step = 1e-6;
        const matrix slopes = ((x_whole.array() + step).unaryExpr(&serial_gelu).matrix() -
                               (x_whole.array() - step).unaryExpr(&serial_gelu).matrix()) /
                              (2 * step);
        const auto x = distribute<row_1d<padded>>(mesh, x_whole);
        const auto dy = distribute<row_1d<padded>>(mesh, dy_whole);
        expect_near(gelu(x), x_whole.unaryExpr(&serial_gelu), 1e-12, "gelu");
        expect_near(gelu_backward(dy, x), slopes, 1e-8, "gelu backward");
        const auto to_float = [](double v) { return static_cast<float>(v); };
        const auto to_double = [](float v) { return static_cast<double>(v); };
        expect_near(transform(gelu(transform(x, to_float)), to_double), x_whole.unaryExpr(&serial_gelu), 1e-6,
                    "float gelu");
        expect_near(transform(gelu_backward(transform(dy, to_float), transform(x, to_float)), to_double), slopes, 1e-6,
                    "float gelu backward");
      },
      rank_counts);
}

// Serial properties of the mask: the keep rate is 1 - rate, seeds give different masks, and the mask
// of an element depends on its global index only.
TEST(dropout_mask, keeps_the_expected_fraction_and_depends_on_the_seed) {
  constexpr std::int64_t rows = 300;
  constexpr std::int64_t cols = 200;
  for (const double rate : {0.1, 0.5, 0.9}) {
    std::int64_t kept = 0;
    std::int64_t differing = 0;
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t j = 0; j < cols; ++j) {
        kept += dropout_keeps(rate, 7, i, j) ? 1 : 0;
        differing += dropout_keeps(rate, 7, i, j) != dropout_keeps(rate, 8, i, j) ? 1 : 0;
      }
    const double fraction = static_cast<double>(kept) / (rows * cols);
    // 60000 draws: the standard deviation of the fraction is at most 0.002; 0.01 is five of them.
    EXPECT_NEAR(fraction, 1 - rate, 0.01) << "rate " << rate;
    // Two independent masks differ with probability 2 rate (1 - rate).
    EXPECT_NEAR(static_cast<double>(differing) / (rows * cols), 2 * rate * (1 - rate), 0.01) << "rate " << rate;
  }
  // Transposed indices are different keys.
  std::int64_t symmetric = 0;
  for (std::int64_t i = 0; i < 100; ++i)
    for (std::int64_t j = 0; j < 100; ++j) symmetric += uniform_at(3, i, j) == uniform_at(3, j, i) ? 1 : 0;
  EXPECT_EQ(symmetric, 100);  // the diagonal only
}

TYPED_TEST(pointwise_ops_test, a_dropout_rate_outside_zero_to_one_throws) {
  TypeParam::run(
      [](auto& world) {
        process_mesh mesh(world, {world.size()});
        const auto x = distribute<row_1d<padded>>(mesh, random_matrix({4, 6}, 33));
        for (const double rate : {-0.1, 1.0, 1.5}) {
          try {
            (void)dropout(x, rate, 1);
            ADD_FAILURE() << "rate " << rate << " was accepted";
          } catch (const argument_error& e) {
            EXPECT_EQ(e.rank(), world.world_rank());
            EXPECT_NE(std::string(e.what()).find("dropout"), std::string::npos) << e.what();
          }
        }
      },
      rank_counts);
}

}  // namespace
