#pragma once
// What a kernel declares it does, so that a backend that models time can price it
// (sim/device_model.hpp) while the code that launches the kernel knows nothing of the model.
#include <type_traits>

#include "shardwise/core/bf16.hpp"

namespace shardwise {

struct work {
  double flops = 0;  // floating-point operations
  double bytes = 0;  // bytes read from and written to device memory
  // Of `flops`, those of products of bf16 operands, and of float operands: a device with matrix units
  // for that precision (tensor cores, matrix cores, a TPU's MXU) runs them at those units' rate, the
  // rest at its vector rate.
  double bf16_product_flops = 0;
  double float_product_flops = 0;
};

// A copy's work: `bytes` read and as many written.
[[nodiscard]] inline work copy_work(double bytes) { return {0, 2 * bytes}; }

// A fill's work (zeroing a buffer): `bytes` written.
[[nodiscard]] inline work fill_work(double bytes) { return {0, bytes}; }

// `w`, of whose operations `product_flops` are products of Operand elements, counted as such where
// Operand is a precision that devices have matrix units for (bf16, float).
template <class Operand>
[[nodiscard]] constexpr work with_products_of(work w, double product_flops) {
  if constexpr (std::is_same_v<Operand, bf16>) w.bf16_product_flops = product_flops;
  if constexpr (std::is_same_v<Operand, float>) w.float_product_flops = product_flops;
  return w;
}

// A GEMM's work: the m x n Result of an m x k by k x n product of Operand elements (added into the
// result when `accumulate`), 2mnk operations, the operands read and the result written (and read, to
// add into).
template <class Operand, class Result = Operand>
[[nodiscard]] work gemm_work(double m, double n, double k, bool accumulate = false) {
  const double flops = 2 * m * n * k;
  return with_products_of<Operand>(
      {flops, sizeof(Operand) * (m * k + k * n) + sizeof(Result) * (accumulate ? 2 : 1) * m * n}, flops);
}

}  // namespace shardwise
