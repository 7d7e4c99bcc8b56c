#pragma once
// Exact arithmetic on sizes. Extents, offsets and element counts are std::int64_t; a product or sum of
// them that does not fit would wrap silently and allocate or index the wrong amount of memory. The
// *_if_fits forms give the exact result or nothing; require_fits() turns nothing into an argument_error
// naming the caller's operation and saying what the values were (`describe()` is called only then, so
// building the message costs nothing on the way that succeeds).
//
//   const std::int64_t elements = require_fits(product_if_fits(rows, cols), rank, "dtensor", [&] {
//     return "a " + shape + " matrix has more elements than fit in 64 bits";
//   });
//
// Where sizes are validated once (a tensor's element count, each block's stored size, a rank's total),
// the index arithmetic inside them is bounded by the validated sizes and needs no further checks.
#include <concepts>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "shardwise/core/error.hpp"

namespace shardwise {

[[nodiscard]] constexpr std::optional<std::int64_t> product_if_fits(std::int64_t a, std::int64_t b) noexcept {
  std::int64_t result = 0;
  if (__builtin_mul_overflow(a, b, &result)) return std::nullopt;
  return result;
}

[[nodiscard]] constexpr std::optional<std::int64_t> sum_if_fits(std::int64_t a, std::int64_t b) noexcept {
  std::int64_t result = 0;
  if (__builtin_add_overflow(a, b, &result)) return std::nullopt;
  return result;
}

// ⌈a / b⌉ for a >= 0, b > 0, without forming a + b - 1 (which overflows for a near the largest int64).
[[nodiscard]] constexpr std::int64_t ceil_divide(std::int64_t a, std::int64_t b) noexcept {
  return a / b + (a % b != 0 ? 1 : 0);
}

// The value of a *_if_fits result, or argument_error(rank, operation, describe()) when it has none.
template <std::invocable Describe>
[[nodiscard]] std::int64_t require_fits(std::optional<std::int64_t> result, int rank, std::string_view operation,
                                        Describe&& describe) {
  if (!result) throw argument_error(rank, operation, std::string(describe()));
  return *result;
}

// A count as the int an MPI call (and the communicator interface) takes; `call` names that call:
// "[rank 2] redistribute: 3000000000 elements would travel between one pair of ranks; all_to_all_v
// counts are int, so at most 2147483647".
[[nodiscard]] inline int checked_count(std::int64_t count, int rank, std::string_view operation, std::string_view call,
                                       std::string_view what = "elements") {
  if (count < 0 || count > std::numeric_limits<int>::max())
    throw argument_error(rank, operation,
                         std::to_string(count) + " " + std::string(what) + "; " + std::string(call) +
                             " counts are int, so at most " + std::to_string(std::numeric_limits<int>::max()));
  return static_cast<int>(count);
}

}  // namespace shardwise
