#pragma once
// How a failure travels in a threads::run. The run keeps one abort flag, every rank's error and the
// groups of ranks it has made. When a rank's body throws (or a rank abandons a call while its error
// unwinds), the run is marked failed and aborted: every group marks the counters its ranks wait on,
// so every rank blocked in (or later entering) a call throws peer_error ("stopped because rank R
// failed: …"). run() then reports the error of the rank that failed on its own (originating_error).
// A run whose ranks all wait or have returned (comm/threads/stall_watch.hpp) aborts the same way, and
// its sleepers throw deadlock_error.
#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardwise/comm/detail/blocking_wait.hpp"
#include "shardwise/comm/threads/stall_watch.hpp"
#include "shardwise/core/error.hpp"

namespace shardwise::threads::detail {

// What an abort must wake: a group's waiting ranks.
class abortable {
 public:
  abortable() = default;
  abortable(const abortable&) = delete;
  abortable& operator=(const abortable&) = delete;
  virtual void abort() noexcept = 0;

 protected:
  ~abortable() = default;
};

// One threads::run: the abort flag, every rank's error and every group, so an abort can wake them all;
// and what each rank is doing, so a wait no rank can end stops.
struct context final : shardwise::detail::sleep_watch {
  explicit context(int ranks) : budget(shardwise::detail::wait_budget_for(ranks)), stalls(ranks) {
    errors.resize(static_cast<std::size_t>(ranks));
  }
  const shardwise::detail::wait_budget budget;
  std::atomic<bool> aborted{false};
  stall_watch stalls;
  std::mutex mutex;
  int failed_rank = -1;                    // the rank that failed first (under mutex)
  std::string failed_reason;               // its error, as its peers quote it; empty until known
  std::string deadlock;                    // how every rank waits or has returned, once they do (under mutex)
  std::vector<std::exception_ptr> errors;  // by world rank
  std::vector<std::weak_ptr<abortable>> groups;

  // How `world_rank` waits in `call`: actively for the budget, then asleep, watched.
  shardwise::detail::waiter waiter(int world_rank, std::string_view call) noexcept {
    return {budget, this, world_rank, call};
  }

  void asleep(int world_rank, std::string_view call, const std::atomic<std::uint32_t>& counter,
              std::uint32_t target) noexcept override {
    if (stalls.asleep(world_rank, call, counter, target)) stop_the_stall();
  }
  void awake(int world_rank) noexcept override { stalls.awake(world_rank); }
  // The rank's body has ended (or thrown): the ranks waiting for it may wait for ever.
  void returned(int world_rank) noexcept {
    if (stalls.returned(world_rank)) stop_the_stall();
  }

  void enroll(const std::shared_ptr<abortable>& group) {
    std::lock_guard lock(mutex);
    groups.push_back(group);
  }

  void abort() noexcept {
    std::vector<std::shared_ptr<abortable>> alive;
    {
      std::lock_guard lock(mutex);
      aborted.store(true);
      for (auto& weak : groups)
        if (auto strong = weak.lock()) alive.push_back(std::move(strong));
    }
    for (auto& g : alive) g->abort();
  }

  void stop_the_stall() noexcept {
    try {
      std::string how = stalls.describe();
      std::lock_guard lock(mutex);
      deadlock = std::move(how);
    } catch (...) {  // no memory for the words: the sleepers say the run was aborted
    }
    abort();
  }

  // Rank `world_rank` is failing: it is abandoning calls while its error unwinds, or (with the error)
  // its body has thrown. Its peers stop; the first rank to fail is the one they name.
  void failing(int world_rank, std::exception_ptr error = nullptr) noexcept {
    {
      std::lock_guard lock(mutex);
      if (failed_rank < 0) failed_rank = world_rank;
      if (error && failed_rank == world_rank && failed_reason.empty()) {
        try {
          failed_reason = reason_of(error);
        } catch (...) {  // no memory for the words: the peers name the rank alone
        }
      }
      if (error) errors[static_cast<std::size_t>(world_rank)] = std::move(error);
    }
    abort();
  }
};

// Why `operation` stopped once the run aborted: a deadlock, or a failed rank.
[[noreturn]] inline void throw_stopped(context& run, int world_rank, std::string_view operation) {
  std::string detail;
  {
    std::lock_guard lock(run.mutex);
    if (!run.deadlock.empty()) throw deadlock_error(world_rank, operation, run.deadlock);
    detail = run.failed_rank < 0 ? std::string("stopped because the run was aborted")
                                 : "stopped because rank " + std::to_string(run.failed_rank) + " failed" +
                                       (run.failed_reason.empty() ? "" : ": " + run.failed_reason);
  }
  throw peer_error(world_rank, operation, detail);
}

inline bool is_peer_error(const std::exception_ptr& failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const peer_error&) {
    return true;
  } catch (...) {
    return false;
  }
}

// The error run() reports: the one that made the others stop, not a peer_error it caused. Only
// ranks that fail on their own raise anything else; if several did, the lowest of them, so the same
// run reports the same error every time.
inline std::pair<int, std::exception_ptr> originating_error(const std::vector<std::exception_ptr>& errors) {
  for (const bool peers_too : {false, true})
    for (std::size_t r = 0; r < errors.size(); ++r)
      if (errors[r] && (peers_too || !is_peer_error(errors[r]))) return {static_cast<int>(r), errors[r]};
  return {-1, nullptr};
}

}  // namespace shardwise::threads::detail
