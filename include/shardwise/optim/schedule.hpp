#pragma once
// Learning-rate schedules: plain values called with the step number (from 1), giving the rate to pass
// to an update's step(). Any callable long → float serves as well.
#include <algorithm>
#include <cmath>
#include <numbers>

namespace shardwise::optim {

struct constant_rate {
  float rate = 1e-3f;
  [[nodiscard]] float operator()(long /*step*/) const noexcept { return rate; }
};

// Linear warm-up from 0 to peak over warmup_steps, then cosine decay to final_rate at total_steps.
struct warmup_cosine {
  float peak = 1e-3f;
  long warmup_steps = 0;
  long total_steps = 1;
  float final_rate = 0.0f;

  // At warmup_steps both pieces give peak; the cosine's takes it, so a schedule without warm-up asked
  // for step 0 (a loop counting from 0) gives peak, not 0/0.
  [[nodiscard]] float operator()(long step) const noexcept {
    if (step < warmup_steps) return peak * static_cast<float>(step) / static_cast<float>(warmup_steps);
    const double progress = std::clamp(
        static_cast<double>(step - warmup_steps) / static_cast<double>(std::max(1L, total_steps - warmup_steps)), 0.0,
        1.0);
    return final_rate + static_cast<float>(0.5 * (1.0 + std::cos(std::numbers::pi * progress))) * (peak - final_rate);
  }
};

// Adafactor's relative step size ρ_t = min(cap, 1/√t).
struct inverse_square_root {
  float cap = 1e-2f;
  [[nodiscard]] float operator()(long step) const noexcept {
    return std::min(cap, static_cast<float>(1.0 / std::sqrt(static_cast<double>(step))));
  }
};

}  // namespace shardwise::optim
