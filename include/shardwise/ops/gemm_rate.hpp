#pragma once
// measured_gemm_flops(): the float GEMM rate of the calling thread's core, measured now, in
// operations per second — the denominator of a training run's MFU (model FLOPs utilisation) on this
// machine. The best of repeated 512x128 · 128x512 products (the shapes of a small model's linears)
// over `duration`, so a moment's interruption does not lower it. The library's own local GEMM
// (ops/gemm.hpp), so the rate is the one its products run at.
#include <Eigen/Core>
#include <algorithm>
#include <chrono>

#include "shardwise/ops/gemm.hpp"

namespace shardwise {

[[nodiscard]] inline double measured_gemm_flops(std::chrono::milliseconds duration = std::chrono::milliseconds(300)) {
  using matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  constexpr Eigen::Index m = 512, k = 128, n = 512;
  const matrix a = matrix::Random(m, k), b = matrix::Random(k, n);
  matrix c(m, n);
  double best = 0;
  const auto until = std::chrono::steady_clock::now() + duration;
  while (std::chrono::steady_clock::now() < until) {
    const auto start = std::chrono::steady_clock::now();
    detail::gemm(detail::destination(c), detail::operand(a), detail::operand(b));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, 2.0 * m * k * n / seconds);
  }
  return best;
}

}  // namespace shardwise
