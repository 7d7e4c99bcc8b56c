#pragma once
// What a kernel declares it does, so that a backend that models time can price it
// (sim/device_model.hpp) while the code that launches the kernel knows nothing of the model.
namespace shardwise {

struct work {
  double flops = 0;  // floating-point operations
  double bytes = 0;  // bytes read from and written to device memory
};

// A copy's work: `bytes` read and as many written.
[[nodiscard]] inline work copy_work(double bytes) { return {0, 2 * bytes}; }

// A fill's work (zeroing a buffer): `bytes` written.
[[nodiscard]] inline work fill_work(double bytes) { return {0, bytes}; }

// A GEMM's work: the m x n result of an m x k by k x n product (added into the result when
// `accumulate`), 2mnk operations, the operands read and the result written (and read, to add into).
[[nodiscard]] inline work gemm_work(double m, double n, double k, double element_bytes, bool accumulate = false) {
  return {2 * m * n * k, element_bytes * (m * k + k * n + (accumulate ? 2 : 1) * m * n)};
}

}  // namespace shardwise
