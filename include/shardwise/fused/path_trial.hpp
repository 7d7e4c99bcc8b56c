#pragma once
// Choosing between two paths of a collective operation by measuring them in use, where no machine
// model can say which is faster (threads, MPI): the first calls alternate the paths (the first path
// first), each after a barrier and timed by its slowest rank; then every rank keeps the path whose
// fastest call was faster. Both paths must give the same results, so only the time differs.
//
// A call's time is its slowest rank's from a common start: timed from each rank's own entry, a call
// would also count the peers' tail of the previous call of the other path (the embedding operator's
// trial then took its baseline where fusing was twice as fast). Each path keeps its fastest call, since
// the first call of each also pays its buffers' first touch. The trial times each path at least
// least_calls and at most most_calls times: more while it has taken less than `time` (calls of a few
// milliseconds vary by more than two paths differ, so two of each chose the slower path now and then).
#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <limits>
#include <span>

#include "shardwise/comm/reduction.hpp"

namespace shardwise::fused {

class path_trial {
 public:
  static constexpr int least_calls = 2;
  static constexpr int most_calls = 8;
  static constexpr std::chrono::duration<double> time = std::chrono::milliseconds(50);

  // Whether the next call takes the first path.
  [[nodiscard]] bool first_path_next() const noexcept { return calls_ % 2 == 0; }
  [[nodiscard]] bool done() const noexcept { return done_; }
  // After done(): whether the first path was the faster (the same on every rank).
  [[nodiscard]] bool chose_first() const noexcept { return chose_first_; }

  // One call of the trial, collective over `comm`: run(first_path_next()), timed; returns its result.
  template <class Comm, class Run>
  auto call(Comm& comm, Run&& run) {
    comm.barrier();
    const bool first = first_path_next();
    const auto start = std::chrono::steady_clock::now();
    auto result = run(first);
    seconds_[static_cast<std::size_t>(calls_)] =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++calls_;
    if (calls_ % 2 != 0 || calls_ < 2 * least_calls) return result;
    // Every rank decides from the same reduced times, so all stop, and choose, together.
    auto slowest = seconds_;
    comm.all_reduce(std::span<double>(slowest.data(), static_cast<std::size_t>(calls_)), op::max);
    std::array<double, 2> fastest{std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()};
    double spent = 0;
    for (int c = 0; c < calls_; ++c) {
      auto& best = fastest[static_cast<std::size_t>(c % 2)];
      best = std::min(best, slowest[static_cast<std::size_t>(c)]);
      spent += slowest[static_cast<std::size_t>(c)];
    }
    if (spent < time.count() && calls_ < 2 * most_calls) return result;
    chose_first_ = fastest[0] <= fastest[1];
    done_ = true;
    return result;
  }

 private:
  std::array<double, 2 * std::size_t{most_calls}> seconds_{};  // this rank's calls: first path, second, first, …
  int calls_ = 0;
  bool done_ = false;
  bool chose_first_ = true;
};

}  // namespace shardwise::fused
