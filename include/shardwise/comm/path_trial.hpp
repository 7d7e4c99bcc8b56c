#pragma once
// Choosing between two paths of a collective operation by measuring them in use, where no machine
// model says which is faster: the first calls run the paths in pairs, each timed by its slowest rank
// from a common start; then every rank keeps the path that was the faster in most pairs. Both paths
// must give the same results, so only the time differs. The fused embedding + all-to-all
// (fused/embedding_all_to_all.hpp) and a layer's collective matmul (ops/collective_matmul_choice.hpp)
// choose this way.
//
// On a communicator that keeps virtual time (sim_gpu: synchronized_now()) the calls are timed in it,
// from the point where every rank's streams have drained and all ranks have met to the next such
// point; virtual time repeats exactly, so one call of each path decides. Elsewhere the wall clock
// times them, from a barrier:
//
// A call's time is its slowest rank's from a common start: timed from each rank's own entry, a call
// would also count the peers' tail of the previous call of the other path (the embedding operator's
// trial then took its baseline where fusing was twice as fast). The paths are compared pair by
// pair, as benchmarks compare them on a machine whose speed drifts, and the first path goes first
// in every other pair: a trial's calls shorten as it goes on (at Criteo Kaggle's batch 2048 on 8
// threads either path's by half or more over a trial's 16 calls), so the later call of a pair has
// the advantage, and comparing each path's fastest call kept the path that always went second, the
// slower one, in 3 trials of 10 there. The first pair is left out, its calls also paying the
// buffers' first touch (4-18 ms there, against 1-2 for the next). The trial makes at least
// least_calls pairs and at most most_calls: more while it has taken less than `time` (calls of a
// few milliseconds vary by more than two paths differ) and while the pairs after the first do not
// favour one path by two pairs or more (on a busy machine calls of 450 ms varied by 15%); then the
// path of the pairs' median ratio.
#include <algorithm>
#include <array>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdlib>
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
  static constexpr int least_calls = 3;  // pairs: the first, and two to compare
  static constexpr int most_calls = 8;
  static constexpr std::chrono::duration<double> time = std::chrono::milliseconds(50);

  // What the trial concludes from its pairs' times so far, `seconds` (the slowest rank's: each pair's
  // first path's, then its second's, whichever ran first; at least least_calls pairs): whether it is
  // done, and if so whether the first path was the faster.
  struct verdict {
    bool done = false;
    bool first_faster = true;
  };
  [[nodiscard]] static verdict judge(std::span<const double> seconds) noexcept {
    // First path over second, each pair after the first, sorted as they come (by insertion: with
    // std::sort, GCC 12 warns a caller's -O2 -Wall build that its branch for more than 16 elements
    // indexes past this array).
    std::array<double, std::size_t{most_calls}> ratios{};
    std::size_t compared = 0;
    int first_ahead = 0;  // pairs the first path won, less those it lost
    double spent = 0;
    // A trial has at most most_calls pairs: any beyond are not its.
    const auto pairs = std::min(seconds.size() / 2, std::size_t{most_calls});
    for (std::size_t pair = 0; pair < pairs; ++pair) {
      const double first = seconds[2 * pair], second = seconds[2 * pair + 1];
      spent += first + second;
      if (pair == 0) continue;
      const double ratio = first / std::max(second, std::numeric_limits<double>::min());
      std::size_t at = compared++;
      for (; at > 0 && ratios[at - 1] > ratio; --at) ratios[at] = ratios[at - 1];
      ratios[at] = ratio;
      first_ahead += first < second ? 1 : first > second ? -1 : 0;
    }
    const double median = compared == 0       ? 1.0
                          : compared % 2 != 0 ? ratios[compared / 2]
                                              : (ratios[compared / 2 - 1] + ratios[compared / 2]) / 2;
    const bool done =
        seconds.size() >= 2 * std::size_t{most_calls} || (spent >= time.count() && std::abs(first_ahead) >= 2);
    return {done, median <= 1.0};
  }

  // Whether the next call takes the first path: first in pairs 0, 2, 4, …, second in 1, 3, ….
  [[nodiscard]] bool first_path_next() const noexcept { return (calls_ % 2 == 0) == (calls_ / 2 % 2 == 0); }
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
  // run(), with this rank's time for it from a common start in its pair's place for its path.
  template <class Comm, class Run>
  auto timed(Comm& comm, Run&& run) {
    const auto pair = static_cast<std::size_t>(calls_ / 2);
    auto& seconds = seconds_[2 * pair + (first_path_next() ? 0 : 1)];
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

  std::array<double, 2 * std::size_t{most_calls}> seconds_{};  // this rank's pairs: first path's, second's, …
  int calls_ = 0;
  bool done_ = false;
  bool chose_first_ = true;
};

}  // namespace shardwise
