#pragma once
// A lock for critical sections of a few instructions that a group's ranks enter at nearly the same
// moment (joining a collective's meeting point). std::mutex puts a contended waiter to sleep in the
// kernel, and the wake-up costs several times the whole section: with two ranks on two cores it was
// most of a small collective's time. This one spins, then yields, so a holder that lost its core
// (more ranks than cores) gets it back. Never held across a wait, so a rank running as a fiber never
// suspends inside it.
#include <atomic>
#include <thread>

#include "shardwise/comm/detail/blocking_wait.hpp"

namespace shardwise::detail {

class spin_lock {
 public:
  void lock() noexcept {
    for (int attempt = 0; locked_.exchange(true, std::memory_order_acquire);) {
      while (locked_.load(std::memory_order_relaxed)) {
        if (++attempt < spins) {
          cpu_relax();
        } else {
          std::this_thread::yield();
        }
      }
    }
  }
  [[nodiscard]] bool try_lock() noexcept {
    return !locked_.load(std::memory_order_relaxed) && !locked_.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  static constexpr int spins = 128;
  std::atomic<bool> locked_{false};
};

}  // namespace shardwise::detail
