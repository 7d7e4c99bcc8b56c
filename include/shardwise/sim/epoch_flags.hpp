#pragma once
// Ready flags that carry an epoch (a call number), in memory every rank of a shared-memory run can
// reach: a peer raises flag f to epoch e when its data for call e is in place, and the owner waits for
// f to reach e. A flag only ever grows (raise keeps the larger value), so a late or repeated signal
// from an earlier call (a smaller epoch) can never satisfy the wait of a later one, and nothing needs
// resetting between calls.
//
// Waiting blocks: a short spin, then sleep on a condition variable until a raise or the deadline
// (with more ranks than cores a spinning waiter would steal the core of the rank it waits for). A
// raise pays for the wake-up only when someone sleeps on that flag.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "shardwise/comm/detail/blocking_wait.hpp"
#include "shardwise/core/error.hpp"

namespace shardwise::sim {

class epoch_flags {
 public:
  explicit epoch_flags(std::size_t count)
      : values_(std::make_unique<std::atomic<std::uint64_t>[]>(count)),
        sleepers_(std::make_unique<std::atomic<int>[]>(count)),
        count_(count) {
    for (std::size_t f = 0; f < count_; ++f) {
      values_[f].store(0, std::memory_order_relaxed);
      sleepers_[f].store(0, std::memory_order_relaxed);
    }
  }
  epoch_flags(const epoch_flags&) = delete;
  epoch_flags& operator=(const epoch_flags&) = delete;

  [[nodiscard]] std::size_t size() const noexcept { return count_; }
  [[nodiscard]] std::uint64_t seen(std::size_t flag) const noexcept {
    return values_[flag].load(std::memory_order_acquire);
  }

  // Raises `flag` to `epoch` (never lowers it). Release: what the raiser wrote before is visible to
  // whoever sees the epoch.
  void raise(std::size_t flag, std::uint64_t epoch) noexcept {
    auto& value = values_[flag];
    std::uint64_t current = value.load(std::memory_order_relaxed);
    while (current < epoch && !value.compare_exchange_weak(current, epoch, std::memory_order_seq_cst)) {
    }
    if (sleepers_[flag].load(std::memory_order_seq_cst) > 0) {
      std::lock_guard lock(mutex_);  // a sleeper is either before its check or inside wait: not lost
      woken_.notify_all();
    }
  }

  // Blocks until `flag` reaches `epoch`; false if `deadline` passes first.
  [[nodiscard]] bool wait(std::size_t flag, std::uint64_t epoch, std::chrono::steady_clock::time_point deadline) {
    for (int spin = 0; spin < 256; ++spin) {
      if (seen(flag) >= epoch) return true;
      shardwise::detail::cpu_relax();
    }
    std::unique_lock lock(mutex_);
    sleepers_[flag].fetch_add(1, std::memory_order_seq_cst);
    const bool reached = woken_.wait_until(lock, deadline, [&] { return seen(flag) >= epoch; });
    sleepers_[flag].fetch_sub(1, std::memory_order_seq_cst);
    return reached;
  }

  // wait(), throwing when the deadline passes: the message names what was awaited and what was seen.
  void wait_or_throw(std::size_t flag, std::uint64_t epoch, std::chrono::steady_clock::time_point deadline,
                     int rank, std::string_view operation, const std::string& what) {
    if (wait(flag, epoch, deadline)) return;
    throw peer_error(rank, operation,
                     "timed out waiting for " + what + ": flag " + std::to_string(flag) + " holds epoch " +
                         std::to_string(seen(flag)) + ", this call is epoch " + std::to_string(epoch));
  }

 private:
  std::unique_ptr<std::atomic<std::uint64_t>[]> values_;
  // Per flag: a raise pays for a wake-up only when someone sleeps on that very flag (an owner waiting
  // for slice 7 is not woken by slices 8, 9, … arriving first).
  std::unique_ptr<std::atomic<int>[]> sleepers_;
  std::size_t count_;
  std::mutex mutex_;
  std::condition_variable woken_;
};

}  // namespace shardwise::sim
