// The local GEMM every product runs (ops/gemm.hpp): each of its four forms, into a block of a larger
// matrix and accumulating or not, equals Eigen's product of the same expressions; operands given as
// transposes, blocks or maps are read as what they are.
#include <gtest/gtest.h>

#include <Eigen/Core>

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

}  // namespace
}  // namespace shardwise
