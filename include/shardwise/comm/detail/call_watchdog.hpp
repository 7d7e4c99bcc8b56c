#pragma once
// How long an MPI rank may wait in one blocking call: SHARDWISE_MPI_TIMEOUT seconds (unset, empty or 0:
// for ever, as MPI itself waits). A call that some ranks of a communicator never make, or calls made
// in different orders, wait for ever under MPI: no process can tell a slow peer from one that will
// never call (threads::run can, and names the deadlock). With the timeout set, mpi::run watches its
// rank from a thread of its own, and a call that has waited longer prints its rank and name and ends
// the process, which ends the job, where the job would hang until killed with no word of where.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "shardwise/core/error.hpp"

namespace shardwise::detail {

// Where this process's rank is: in which blocking call, since when (no call: empty).
struct call_clock {
  std::atomic<bool> watched{false};  // no watchdog: calls are not timed at all
  std::mutex mutex;
  std::string_view call;
  std::chrono::steady_clock::time_point since;

  static call_clock& of_this_process() {
    static call_clock clock;
    return clock;
  }
};

// Marks the rank as inside `call` while it lives: the outermost call, when calls nest.
class inside_call {
 public:
  explicit inside_call(std::string_view call) {
    call_clock& clock = call_clock::of_this_process();
    if (!clock.watched.load(std::memory_order_relaxed)) return;
    std::lock_guard lock(clock.mutex);
    if (!clock.call.empty()) return;
    clock.call = call;
    clock.since = std::chrono::steady_clock::now();
    marked_ = true;
  }
  inside_call(const inside_call&) = delete;
  inside_call& operator=(const inside_call&) = delete;
  ~inside_call() {
    if (!marked_) return;
    call_clock& clock = call_clock::of_this_process();
    std::lock_guard lock(clock.mutex);
    clock.call = {};
  }

 private:
  bool marked_ = false;
};

inline constexpr const char* timeout_variable = "SHARDWISE_MPI_TIMEOUT";

// SHARDWISE_MPI_TIMEOUT in seconds; nothing when unset, empty or 0. Throws argument_error for a value
// that is not a number of seconds.
inline std::optional<std::chrono::duration<double>> call_timeout_from_environment(int world_rank) {
  const char* text = std::getenv(timeout_variable);
  if (text == nullptr || *text == '\0') return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const double seconds = std::strtod(text, &end);
  if (*end != '\0' || errno != 0 || !(seconds >= 0) || seconds > 1e9)
    throw argument_error(world_rank, "mpi::run",
                         std::string(timeout_variable) + " is \"" + text +
                             "\", not a number of seconds (0 or unset: calls wait for ever)");
  if (seconds == 0) return std::nullopt;
  return std::chrono::duration<double>(seconds);
}

// Watches the process's call clock while it lives; a call that has waited longer than `limit` ends
// the process (exit status 1) after one line on stderr naming the rank and the call.
class call_watchdog {
 public:
  call_watchdog(int world_rank, std::chrono::duration<double> limit)
      : world_rank_(world_rank), limit_(limit), thread_([this](const std::stop_token& stop) { watch(stop); }) {
    call_clock::of_this_process().watched.store(true);
  }
  call_watchdog(const call_watchdog&) = delete;
  call_watchdog& operator=(const call_watchdog&) = delete;
  ~call_watchdog() {
    call_clock::of_this_process().watched.store(false);
    thread_.request_stop();  // wakes the watch at once (condition_variable_any's stop_token wait)
  }

 private:
  void watch(const std::stop_token& stop) {
    const auto period = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::min<std::chrono::duration<double>>(limit_ / 4, std::chrono::seconds(1)));
    std::unique_lock lock(mutex_);
    while (!stop.stop_requested()) {
      wake_.wait_for(lock, stop, period, [] { return false; });
      if (stop.stop_requested()) return;
      call_clock& clock = call_clock::of_this_process();
      std::string_view call;
      {
        std::lock_guard inside(clock.mutex);
        if (clock.call.empty() || std::chrono::steady_clock::now() - clock.since < limit_) continue;
        call = clock.call;
      }
      // The rank is blocked in MPI: this thread may not call MPI (MPI_THREAD_FUNNELED), so it ends
      // the process, and mpiexec the job.
      std::fflush(stdout);
      std::fprintf(
          stderr,
          "[rank %d] %.*s: waited more than %g s (%s): a call that some ranks of its communicator "
          "never make, or calls made in different orders, would wait for ever; ending the job (run the program on "
          "threads to have the deadlock named)\n",
          world_rank_, static_cast<int>(call.size()), call.data(), limit_.count(), timeout_variable);
      std::fflush(stderr);
      std::_Exit(1);
    }
  }

  int world_rank_;
  std::chrono::duration<double> limit_;
  std::mutex mutex_;
  std::condition_variable_any wake_;
  std::jthread thread_;  // last: it starts once the members above exist
};

// The watch SHARDWISE_MPI_TIMEOUT asks for (none when it is unset, empty or 0), for as long as the
// result lives.
inline std::optional<call_watchdog> watchdog_from_environment(int world_rank) {
  const auto limit = call_timeout_from_environment(world_rank);
  if (!limit) return std::nullopt;
  return std::optional<call_watchdog>(std::in_place, world_rank, *limit);
}

}  // namespace shardwise::detail
