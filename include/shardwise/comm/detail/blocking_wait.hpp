#pragma once
// Waiting on a counter shared by threads: spin briefly (the common case on idle cores is a wait of a
// few hundred nanoseconds), yield a little, then sleep in the kernel (futex via std::atomic::wait).
// With more ranks than cores a spinning waiter would steal the core of the rank it waits for. A rank
// that runs as a fiber (comm/detail/fibers.hpp) suspends instead, and its thread runs another rank. At
// the end, the sleep and wake-up for a word shared by processes too (comm/shared/epoch_flags.hpp).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <concepts>
#include <cstdint>
#include <string_view>
#include <thread>

#include "shardwise/comm/detail/fibers.hpp"
#include "shardwise/comm/detail/wait_target.hpp"

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <ctime>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace shardwise::detail {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// How long to wait actively before sleeping in the kernel: spin, then yield the core, then sleep.
// While every waiter has a core of its own, a peer usually arrives within microseconds and a futex
// wake-up would cost more than the wait. With more waiters than cores, spinning only delays the peer
// being waited for, while a yield usually hands the core to it, where a sleep makes the peer pay for
// a wake-up too (8 ranks on 2 cores: fused embedding calls, which wait on a flag per slice, took up to
// 40% less time with 128 yields before a sleep than with none; collectives were unchanged).
struct wait_budget {
  int spins = 0;
  int yields = 0;
};

inline wait_budget wait_budget_for(int waiters) noexcept {
  const auto cores = static_cast<int>(std::thread::hardware_concurrency());
  return waiters <= cores ? wait_budget{8192, 8} : wait_budget{128, 128};
}

// The active part of a wait: spins, then yields, as `budget` allows, until `ready()` holds. True as
// soon as it does; false once the budget is spent, when the caller sleeps.
template <std::predicate Ready>
bool wait_actively(wait_budget budget, Ready&& ready) {
  for (int spin = 0; spin < budget.spins; ++spin) {
    if (ready()) return true;
    cpu_relax();
  }
  for (int yield = 0; yield < budget.yields; ++yield) {
    if (ready()) return true;
    std::this_thread::yield();
  }
  return ready();
}

// Told when a blocked rank stops waiting actively and when it resumes, with the count it waits for
// and the call it waits in: a threads::run learns from it that every rank waits or has returned, a
// wait no rank can end (comm/threads/stall_watch.hpp).
class sleep_watch {
 public:
  sleep_watch() = default;
  sleep_watch(const sleep_watch&) = delete;
  sleep_watch& operator=(const sleep_watch&) = delete;
  virtual void asleep(int rank, std::string_view call, const std::atomic<std::uint32_t>& counter,
                      std::uint32_t target) noexcept = 0;
  virtual void awake(int rank) noexcept = 0;

 protected:
  ~sleep_watch() = default;
};

// Who waits, in which call, how long actively, and who is told when it sleeps (nobody when null).
struct waiter {
  wait_budget budget;
  sleep_watch* watch = nullptr;
  int rank = -1;
  std::string_view call;
};

// Tells `who`'s watch that it sleeps, for as long as this lives.
class asleep_while_here {
 public:
  asleep_while_here(const waiter& who, const std::atomic<std::uint32_t>& counter, std::uint32_t target) noexcept
      : who_(who) {
    if (who_.watch != nullptr) who_.watch->asleep(who_.rank, who_.call, counter, target);
  }
  asleep_while_here(const asleep_while_here&) = delete;
  asleep_while_here& operator=(const asleep_while_here&) = delete;
  ~asleep_while_here() {
    if (who_.watch != nullptr) who_.watch->awake(who_.rank);
  }

 private:
  const waiter& who_;
};

// Blocks until the counter reaches target (true) or is marked aborted first (false); `block` =
// false checks once.
inline bool wait_until(const std::atomic<std::uint32_t>& counter, std::uint32_t target, bool block, const waiter& who) {
  std::uint32_t value = 0;
  const auto settled_now = [&] {
    value = counter.load(std::memory_order_acquire);
    return settled(value, target);
  };
  // Complete, even if the run aborted since.
  const auto complete = [&] { return (value & ~aborted_bit) >= target; };
  fiber_thread* const fibers = fibers_of_this_thread();
  if (!block) {
    // A rank that polls (`while (!request.test())`) lets its thread's other ranks run once between
    // looks: they may be the ones it waits for.
    if (!settled_now() && fibers != nullptr) {
      fibers->yield();
      settled_now();
    }
    return complete();
  }
  if (fibers != nullptr ? settled_now() : wait_actively(who.budget, settled_now)) return complete();
  const asleep_while_here asleep(who, counter, target);
  while (!settled_now()) {
    if (fibers != nullptr) {
      fibers->wait_for(counter, target);  // resumed once the counter moves far enough
    } else {
      counter.wait(value, std::memory_order_acquire);
    }
  }
  return complete();
}

// Adds one arrival; the arrival that completes the count wakes the sleepers.
inline void arrive(std::atomic<std::uint32_t>& counter, std::uint32_t target) noexcept {
  if (counter.fetch_add(1, std::memory_order_acq_rel) + 1 == target) counter.notify_all();
}

inline void mark_aborted(std::atomic<std::uint32_t>& counter) noexcept {
  counter.fetch_or(aborted_bit, std::memory_order_acq_rel);
  counter.notify_all();
}

// Sleeps while `word` holds `expected`, for at most `timeout`; may return early (callers look again).
// Unlike std::atomic::wait, whose futex is private to one process, this one also wakes a waiter in
// another process that maps the same memory (MPI ranks sharing a segment).
inline void sleep_across_processes(const std::atomic<std::uint32_t>& word, std::uint32_t expected,
                                   std::chrono::steady_clock::duration timeout) noexcept {
#if defined(__linux__)
  const auto nanoseconds = std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count();
  const timespec relative{static_cast<time_t>(nanoseconds / 1'000'000'000),
                          static_cast<long>(nanoseconds % 1'000'000'000)};
  static_assert(sizeof(word) == sizeof(std::uint32_t), "a futex is a 32-bit word");
  syscall(SYS_futex, reinterpret_cast<const std::uint32_t*>(&word), FUTEX_WAIT, expected, &relative, nullptr, 0);
#else
  (void)word, (void)expected;  // no futex shared between processes: sleep a little, the caller looks again
  std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(timeout, std::chrono::microseconds(50)));
#endif
}

inline void wake_all_processes(std::atomic<std::uint32_t>& word) noexcept {
#if defined(__linux__)
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
#else
  (void)word;
#endif
}

}  // namespace shardwise::detail
