#pragma once
// Ready flags that carry an epoch (a call number), in memory every rank of a shared-memory run can
// reach (threads of one process, or processes mapping one segment: comm/shared_memory.hpp): a peer
// raises flag f to epoch e when its data for call e is in place, and the owner waits for f to reach e.
// A flag only ever grows (raise keeps the larger value), so a late or repeated signal from an earlier
// call (a smaller epoch) can never satisfy the wait of a later one, and nothing needs resetting
// between calls.
//
// Waiting blocks: a spin, yields of the core, then sleep in the kernel until a raise or the deadline;
// a rank that runs as a fiber (comm/detail/fibers.hpp) lets its thread's other ranks run instead. How
// long each lasts is comm/detail/blocking_wait.hpp's wait_budget_for: the spin is long only while
// every rank has a core, since with more ranks than cores a spinning waiter steals the core of the
// rank it waits for (256 spins per flag took 13% of a small fused call's time with 8 ranks on 2
// cores), and a yield hands it over. The flags are plain words with no mutex, so processes
// can share them: a waiter sleeps on its flag's count of raises (a futex that is not private to one
// process, comm/detail/blocking_wait.hpp), and a raise pays for the wake-up only when someone sleeps
// on that flag.
#include <atomic>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "shardwise/comm/detail/blocking_wait.hpp"
#include "shardwise/core/error.hpp"

namespace shardwise {

// One flag as it lies in memory; value-initialised (all zero) it is a fresh flag.
struct epoch_flag_word {
  std::atomic<std::uint64_t> epoch;
  std::atomic<std::uint32_t> raises;    // what a sleeping waiter watches
  std::atomic<std::uint32_t> sleepers;  // per flag: an owner waiting for slice 7 is not woken by slices 8, 9, …
};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free && std::atomic<std::uint32_t>::is_always_lock_free,
              "shardwise: epoch flags are shared between processes, which needs lock-free atomics");

class epoch_flags {
 public:
  // `count` fresh flags of its own; `ranks`: how many ranks share the cores and may wait at once.
  explicit epoch_flags(std::size_t count, int ranks = 1)
      : owned_(std::make_unique<epoch_flag_word[]>(count)),
        words_(owned_.get(), count),
        budget_(shardwise::detail::wait_budget_for(ranks)) {}
  // The flags in `words`: another rank's, or this rank's in shared memory.
  explicit epoch_flags(std::span<epoch_flag_word> words, int ranks = 1) noexcept
      : words_(words), budget_(shardwise::detail::wait_budget_for(ranks)) {}

  [[nodiscard]] std::size_t size() const noexcept { return words_.size(); }
  [[nodiscard]] std::uint64_t seen(std::size_t flag) const noexcept {
    return words_[flag].epoch.load(std::memory_order_acquire);
  }

  // Raises `flag` to `epoch` (never lowers it). Release: what the raiser wrote before is visible to
  // whoever sees the epoch.
  void raise(std::size_t flag, std::uint64_t epoch) const noexcept {
    auto& word = words_[flag];
    std::uint64_t current = word.epoch.load(std::memory_order_relaxed);
    do {
      if (current >= epoch) return;
    } while (!word.epoch.compare_exchange_weak(current, epoch, std::memory_order_seq_cst));
    // A waiter counts itself a sleeper before it sleeps, and sleeps only while `raises` holds what it
    // read before its last look at the epoch: either it sees this raise or this raise sees it.
    word.raises.fetch_add(1, std::memory_order_seq_cst);
    if (word.sleepers.load(std::memory_order_seq_cst) > 0) shardwise::detail::wake_all_processes(word.raises);
  }

  // Blocks until `flag` reaches `epoch`; false if `deadline` passes first.
  [[nodiscard]] bool wait(std::size_t flag, std::uint64_t epoch, std::chrono::steady_clock::time_point deadline) const {
    auto& word = words_[flag];
    if (auto* fibers =
            shardwise::detail::fibers_of_this_thread()) {  // ranks as fibers: the raiser may share this thread
      while (seen(flag) < epoch) {
        if (std::chrono::steady_clock::now() >= deadline) return false;
        fibers->yield();
      }
      return true;
    }
    if (shardwise::detail::wait_actively(budget_, [&] { return seen(flag) >= epoch; })) return true;
    for (;;) {
      const std::uint32_t raises = word.raises.load(std::memory_order_seq_cst);
      if (seen(flag) >= epoch) return true;
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) return false;
      word.sleepers.fetch_add(1, std::memory_order_seq_cst);
      shardwise::detail::sleep_across_processes(word.raises, raises, deadline - now);
      word.sleepers.fetch_sub(1, std::memory_order_seq_cst);
    }
  }

  // wait(), throwing when the deadline passes: the message names what was awaited (`what()`, asked only
  // then: a call waits on hundreds of flags) and what was seen.
  template <std::invocable Describe>
  void wait_or_throw(std::size_t flag, std::uint64_t epoch, std::chrono::steady_clock::time_point deadline, int rank,
                     std::string_view operation, Describe&& what) const {
    if (wait(flag, epoch, deadline)) return;
    throw peer_error(rank, operation,
                     "timed out waiting for " + std::string(what()) + ": flag " + std::to_string(flag) +
                         " holds epoch " + std::to_string(seen(flag)) + ", this call is epoch " +
                         std::to_string(epoch));
  }

 private:
  std::unique_ptr<epoch_flag_word[]> owned_;  // or none: the words live in shared memory
  std::span<epoch_flag_word> words_;
  shardwise::detail::wait_budget budget_;
};

}  // namespace shardwise
