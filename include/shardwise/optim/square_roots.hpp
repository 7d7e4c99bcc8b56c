#pragma once
// Square roots of a run of floats, vectorised. A loop calling std::sqrt is not vectorised unless the
// program is built with -fno-math-errno (std::sqrt may set errno, and that branch stops the
// vectoriser), yet the per-element square root is most of an Adam step's arithmetic. The vector
// instructions used here are correctly rounded, so the results are exactly std::sqrt's.
#include <cmath>
#include <cstddef>
#include <span>

#if defined(__SSE__) || defined(_M_X64)
#include <xmmintrin.h>
#elif defined(__ARM_NEON) && defined(__aarch64__)
#include <arm_neon.h>
#endif

namespace shardwise::optim {

// roots[i] = √values[i]; the two may be the same array.
inline void square_roots(std::span<const float> values, std::span<float> roots) noexcept {
  const float* from = values.data();
  float* to = roots.data();
  std::size_t i = 0;
#if defined(__SSE__) || defined(_M_X64)
  for (; i + 4 <= values.size(); i += 4) _mm_storeu_ps(to + i, _mm_sqrt_ps(_mm_loadu_ps(from + i)));
#elif defined(__ARM_NEON) && defined(__aarch64__)
  for (; i + 4 <= values.size(); i += 4) vst1q_f32(to + i, vsqrtq_f32(vld1q_f32(from + i)));
#endif
  for (; i < values.size(); ++i) to[i] = std::sqrt(from[i]);
}

}  // namespace shardwise::optim
