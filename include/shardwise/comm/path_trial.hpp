#pragma once
// Choosing between two paths of a collective operation by measuring them in use, where no machine
// model says which is faster: the first calls alternate the paths (the first path first), each timed
// by its slowest rank from a common start; then every rank keeps the path whose fastest call was
// faster. Both paths must give the same results, so only the time differs. The fused embedding +
// all-to-all (fused/embedding_all_to_all.hpp) and a layer's collective matmul
// (ops/collective_matmul_choice.hpp) choose this way.
//
// On a communicator that keeps virtual time (sim_gpu: synchronized_now()) the calls are timed in it,
// from the point where every rank's streams have drained and all ranks have met to the next such
// point; virtual time repeats exactly, so one call of each path decides. Elsewhere the wall clock
// times them, from a barrier:
//
// A call's time is its slowest rank's from a common start: timed from each rank's own entry, a call
// would also count the peers' tail of the previous call of the other path (the embedding operator's
// trial then took its baseline where fusing was twice as fast). Each path keeps its fastest call, since
// the first call of each also pays its buffers' first touch. The trial times each path at least
// least_calls and at most most_calls times: more while it has taken less than `time` (calls of a few
// milliseconds vary by more than two paths differ, so two of each chose the slower path now and then),
// and more while the paths' fastest calls lie closer together than each path's own two fastest do
// (on a busy machine calls of 450 ms varied by 15%, and after two of each the trial took the path 20%
// slower in one run of three).
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <limits>
#include <span>
#include <utility>

#include "shardwise/comm/reduction.hpp"

namespace shardwise {

// A communicator whose time is virtual (sim_gpu): the time once its streams have drained and all ranks
// have met.
template <class Comm>
concept keeps_virtual_time = requires(Comm& comm) {
  { comm.synchronized_now() } -> std::convertible_to<double>;
};

class path_trial {
 public:
  static constexpr int least_calls = 2;
  static constexpr int most_calls = 8;
  static constexpr std::chrono::duration<double> time = std::chrono::milliseconds(50);

  // What the trial concludes from its calls' times so far, `seconds` (the slowest rank's; first path,
  // second, first, …; an even number of at least 2·least_calls): whether it is done, and if so
  // whether the first path was the faster.
  struct verdict {
    bool done = false;
    bool first_faster = true;
  };
  [[nodiscard]] static verdict judge(std::span<const double> seconds) noexcept {
    // Each path's fastest and second fastest call.
    std::array<std::array<double, 2>, 2> least;
    for (auto& path : least) path.fill(std::numeric_limits<double>::infinity());
    double spent = 0;
    for (std::size_t c = 0; c < seconds.size(); ++c) {
      auto& path = least[c % 2];
      if (seconds[c] < path[0]) path = {seconds[c], path[0]};
      else
        path[1] = std::min(path[1], seconds[c]);
      spent += seconds[c];
    }
    const double spread = std::max(least[0][1] - least[0][0], least[1][1] - least[1][0]);
    const bool apart = std::abs(least[0][0] - least[1][0]) > spread;
    const bool done = seconds.size() >= 2 * std::size_t{most_calls} || (spent >= time.count() && apart);
    return {done, least[0][0] <= least[1][0]};
  }

  // Whether the next call takes the first path.
  [[nodiscard]] bool first_path_next() const noexcept { return calls_ % 2 == 0; }
  [[nodiscard]] bool done() const noexcept { return done_; }
  // After done(): whether the first path was the faster (the same on every rank).
  [[nodiscard]] bool chose_first() const noexcept { return chose_first_; }

  // One call of the trial, collective over `comm`: run(first_path_next()), timed; returns its result.
  template <class Comm, class Run>
  auto call(Comm& comm, Run&& run) {
    const bool first = first_path_next();
    auto result = timed(comm, [&] { return std::forward<Run>(run)(first); });
    ++calls_;
    constexpr int least = keeps_virtual_time<Comm> ? 1 : least_calls;
    if (calls_ % 2 != 0 || calls_ < 2 * least) return result;
    // Every rank decides from the same reduced times, so all stop, and choose, together.
    auto slowest = seconds_;
    const std::span<double> so_far(slowest.data(), static_cast<std::size_t>(calls_));
    comm.all_reduce(so_far, op::max);
    const verdict v = keeps_virtual_time<Comm> ? verdict{true, so_far[0] <= so_far[1]} : judge(so_far);
    done_ = v.done;
    chose_first_ = v.first_faster;
    return result;
  }

 private:
  // run(), with this rank's time for it from a common start in seconds_[calls_].
  template <class Comm, class Run>
  auto timed(Comm& comm, Run&& run) {
    auto& seconds = seconds_[static_cast<std::size_t>(calls_)];
    if constexpr (keeps_virtual_time<Comm>) {
      const double start = comm.synchronized_now();
      auto result = run();
      seconds = comm.synchronized_now() - start;
      return result;
    } else {
      comm.barrier();
      const auto start = std::chrono::steady_clock::now();
      auto result = run();
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      return result;
    }
  }

  std::array<double, 2 * std::size_t{most_calls}> seconds_{};  // this rank's calls: first path, second, first, …
  int calls_ = 0;
  bool done_ = false;
  bool chose_first_ = true;
};

}  // namespace shardwise
