#pragma once
// What a waiter on a counter shared by ranks waits for: the counter to reach its target, or the run
// to be aborted, which the counter's top bit marks. Blocking waits (blocking_wait.hpp), fibers
// (fibers.hpp) and the threads backend's deadlock watch all ask the same question.
#include <cstdint>

namespace shardwise::detail {

// The top bit of a counter marks an aborted run: every waiter on it wakes and gives up.
inline constexpr std::uint32_t aborted_bit = std::uint32_t{1} << 31;

// A waiter on `value` for `target` may stop waiting: the count is reached, or the run aborted.
[[nodiscard]] inline bool settled(std::uint32_t value, std::uint32_t target) noexcept {
  return (value & ~aborted_bit) >= target || (value & aborted_bit) != 0;
}

}  // namespace shardwise::detail
