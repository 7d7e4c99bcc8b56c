#pragma once
// Adafactor (Shazeer & Stern, "Adaptive Learning Rates with Sublinear Memory Cost"), without first
// moment: the second moment of an r × c parameter is kept factored, as row means R (r floats) and column
// means C (c floats) of g² + ε1, and estimated as V̂ = R Cᵀ / mean(R). A vector is a 1 × n matrix, for
// which V̂ is the unfactored moment C.
//   β2(t) = 1 − t^(−decay_rate);  R ← β2 R + (1 − β2) rowmean(g² + ε1);  C ← β2 C + (1 − β2) colmean(g² + ε1)
//   u = g / √V̂;  u ← u / max(1, RMS(u) / d);  α = relative_step ? max(ε2, RMS(w)) · lr : lr;  w ← w − α u
// (lr is the schedule's ρ_t, e.g. min(10⁻², 1/√t)). Two reduction rounds: first the row and column sums
// of g² + ε1 and Σ w², then Σ u² (u needs the new R and C). R and C are per-tensor state: every replica
// holds the same copy, computed from the complete sums; no state is kept per element.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <span>
#include <string_view>

#include "shardwise/optim/optimizer.hpp"

namespace shardwise::optim {

struct adafactor {
  float decay_rate = 0.8f;
  float epsilon1 = 1e-30f;      // added to g² before averaging
  float epsilon2 = 1e-3f;       // floor of RMS(w) in the relative step size
  float clip_threshold = 1.0f;  // d
  bool relative_step = true;

  static constexpr std::array<std::string_view, 0> state_names{};
  static constexpr int reduction_rounds = 2;
  static constexpr bool statistics_per_row_and_column = true;

  // Per-tensor state: R (rows floats), C (cols floats), then mean(R).
  [[nodiscard]] std::size_t tensor_state_size(parameter_shape shape) const { return shape.rows + shape.cols + 1; }

  // Round 0: row sums (rows), column sums (cols) of g² + ε1, then Σ w². Round 1: Σ u².
  [[nodiscard]] std::size_t statistics_size(int round, parameter_shape shape) const {
    return round == 0 ? shape.rows + shape.cols + 1 : 1;
  }

  void accumulate(int round, const step_info&, const slice<0>& piece, std::span<const float> state,
                  std::span<double> sums) const {
    const std::size_t rows = piece.shape.rows;
    const std::size_t cols = piece.shape.cols;
    std::size_t row = piece.first / cols;
    std::size_t col = piece.first % cols;
    for (std::size_t i = 0; i < piece.size(); ++i) {
      const float g = piece.gradients[i];
      if (round == 0) {
        const double square = g * g + epsilon1;
        sums[row] += square;
        sums[rows + col] += square;
        sums[rows + cols] += static_cast<double>(piece.weights[i]) * piece.weights[i];
      } else {
        const float u = scaled_gradient(g, state, rows, row, col);
        sums[0] += static_cast<double>(u) * u;
      }
      if (++col == cols) {
        col = 0;
        ++row;
      }
    }
  }

  // After round 0: the new factored moments from the complete row and column sums.
  void finish(int round, const step_info& step, parameter_shape shape, std::span<const double> sums,
              std::span<float> state) const {
    if (round != 0) return;
    const double beta2 = 1.0 - std::pow(static_cast<double>(step.step), -static_cast<double>(decay_rate));
    double row_total = 0.0;
    for (std::size_t r = 0; r < shape.rows; ++r) {
      state[r] = static_cast<float>(beta2 * state[r] + (1.0 - beta2) * sums[r] / static_cast<double>(shape.cols));
      row_total += state[r];
    }
    for (std::size_t c = 0; c < shape.cols; ++c) {
      const std::size_t k = shape.rows + c;
      state[k] = static_cast<float>(beta2 * state[k] + (1.0 - beta2) * sums[k] / static_cast<double>(shape.rows));
    }
    state[shape.rows + shape.cols] = static_cast<float>(row_total / static_cast<double>(shape.rows));
  }

  void apply(const step_info& step, const slice<0>& piece, const tensor_context& tensor) const {
    const auto n = static_cast<double>(tensor.shape.size());
    const double update_rms = std::sqrt(tensor.statistics[1][0] / n);
    const double weight_rms = std::sqrt(tensor.statistics[0][tensor.shape.rows + tensor.shape.cols] / n);
    const double step_size =
        (relative_step ? std::max(static_cast<double>(epsilon2), weight_rms) : 1.0) * step.learning_rate;
    const auto rate = static_cast<float>(step_size / std::max(1.0, update_rms / clip_threshold));
    const std::size_t cols = piece.shape.cols;
    std::size_t row = piece.first / cols;
    std::size_t col = piece.first % cols;
    for (std::size_t i = 0; i < piece.size(); ++i) {
      piece.weights[i] -= rate * scaled_gradient(piece.gradients[i], tensor.state, piece.shape.rows, row, col);
      if (++col == cols) {
        col = 0;
        ++row;
      }
    }
  }

 private:
  // u = g / √(R_row C_col / mean(R)).
  [[nodiscard]] static float scaled_gradient(float g, std::span<const float> state, std::size_t rows, std::size_t row,
                                             std::size_t col) {
    const float mean_of_rows = state[state.size() - 1];
    return g / std::sqrt(state[row] * state[rows + col] / mean_of_rows);
  }
};

}  // namespace shardwise::optim
