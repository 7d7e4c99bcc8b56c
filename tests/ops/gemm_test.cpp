// The local GEMM every product runs (ops/gemm.hpp): each of its four forms, into a block of a larger
// matrix and accumulating or not, equals Eigen's product of the same expressions; operands given as
// transposes, blocks or maps are read as what they are. bf16 operands are multiplied in float and
// their product rounded once, into bf16 or into float.
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <cmath>

#include "shardwise/core/bf16.hpp"
#include "shardwise/ops/gemm.hpp"

namespace shardwise {
namespace {

using matrix = detail::row_major<double>;

TEST(local_gemm, every_form_equals_eigens_product) {
  const matrix a = matrix::Random(9, 5);  // stored 9x5: op(a) 3x4 is a block of it or of its transpose
  const matrix b = matrix::Random(6, 8);  // op(b) 4x2 likewise
  const auto a_block = a.block(1, 1, 3, 4);
  const auto a_transposed_block = a.block(2, 0, 4, 3);  // whose transpose is 3x4
  const auto b_block = b.block(2, 3, 4, 2);
  const auto b_transposed_block = b.block(0, 1, 2, 4);
  const matrix start = matrix::Random(7, 6);
  for (const bool accumulate : {false, true}) {
    const auto check = [&](const auto& left, const auto& right, const auto& l, const auto& r) {
      matrix out = start;
      detail::gemm(detail::destination(out.block(2, 1, 3, 2)), l, r, accumulate);
      matrix expected = start;
      if (accumulate) {
        expected.block(2, 1, 3, 2) += left * right;
      } else {
        expected.block(2, 1, 3, 2) = left * right;
      }
      EXPECT_TRUE(out.isApprox(expected, 1e-14)) << "accumulate " << accumulate << "\n" << out << "\n\n" << expected;
    };
    check(a_block, b_block, detail::operand(a_block), detail::operand(b_block));
    check(a_transposed_block.transpose(), b_block, detail::operand(a_transposed_block).transposed(),
          detail::operand(b_block));
    check(a_block, b_transposed_block.transpose(), detail::operand(a_block),
          detail::operand(b_transposed_block).transposed());
    check(a_transposed_block.transpose(), b_transposed_block.transpose(),
          detail::operand(a_transposed_block).transposed(), detail::operand(b_transposed_block).transposed());
    // A transposed expression is read as the transpose of its storage; transposing it again reads it as stored.
    check(a_transposed_block.transpose(), b_block, detail::operand(a_transposed_block.transpose()),
          detail::operand(b_block));
    check(a_block, b_block, detail::operand(a_block.transpose()).transposed(), detail::operand(b_block));
  }
}

// 1024 products of ones: summed in bf16, the sum would stop at 256 (256 + 1 rounds to 256).
TEST(local_gemm, bf16_products_accumulate_in_float) {
  constexpr int k = 1024;
  const detail::row_major<bf16> ones = detail::row_major<bf16>::Constant(1, k, bf16(1.0f));
  detail::row_major<bf16> product(1, 1);
  detail::gemm(detail::destination(product), detail::operand(ones), detail::operand(ones).transposed());
  EXPECT_EQ(static_cast<float>(product(0, 0)), 1024.0f);
  // Into a float gradient, accumulating: 0.5 + 1024 is kept whole, as bf16 could not keep it.
  detail::row_major<float> gradient = detail::row_major<float>::Constant(1, 1, 0.5f);
  detail::gemm(detail::destination(gradient), detail::operand(ones), detail::operand(ones).transposed(), true);
  EXPECT_EQ(gradient(0, 0), 1024.5f);
}

TEST(local_gemm, bf16_product_is_the_float_product_rounded) {
  const detail::row_major<float> a = detail::row_major<float>::Random(5, 64),
                                 b = detail::row_major<float>::Random(64, 3);
  const detail::row_major<bf16> a16 = a.cast<bf16>(), b16 = b.cast<bf16>();
  detail::row_major<bf16> product(5, 3);
  detail::gemm(detail::destination(product), detail::operand(a16), detail::operand(b16));
  const detail::row_major<double> exact = a16.cast<double>() * b16.cast<double>();
  const detail::row_major<double> bound = a16.cast<double>().cwiseAbs() * b16.cast<double>().cwiseAbs();
  for (Eigen::Index i = 0; i < exact.rows(); ++i)
    for (Eigen::Index j = 0; j < exact.cols(); ++j)  // one rounding to bf16 (2^-9), and the float sum's
      EXPECT_LE(std::abs(static_cast<double>(product(i, j)) - exact(i, j)),
                0x1p-9 * std::abs(exact(i, j)) + 1e-5 * bound(i, j))
          << i << ", " << j;
}

}  // namespace
}  // namespace shardwise
