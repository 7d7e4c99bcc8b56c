#pragma once
// A wait no rank can end. Every rank of a threads::run runs, sleeps in a call until a count reaches
// its target, or has returned from its body; only a running rank raises a count. Once none runs and
// no sleeper's count has reached its target, none ever will: a call that some ranks of its group
// never make, or calls made in different orders. An MPI process cannot tell this (it cannot know
// whether a peer will call yet) and hangs; a threads::run sees every rank, so it stops the sleepers
// with a deadlock_error that names each one's call and the ranks that returned.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardwise/comm/detail/blocking_wait.hpp"
#include "shardwise/comm/detail/spin_lock.hpp"
#include "shardwise/comm/detail/wait_target.hpp"

namespace shardwise::threads::detail {

// "rank 3", "ranks 1 and 2", "ranks 0, 2 and 4..63": ascending world ranks, runs of three or more as
// first..last.
inline std::string ranks_in_words(const std::vector<int>& ranks) {
  std::vector<std::string> parts;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t last = i;
    while (last + 1 < ranks.size() && ranks[last + 1] == ranks[last] + 1) ++last;
    if (last >= i + 2) {
      parts.push_back(std::to_string(ranks[i]) + ".." + std::to_string(ranks[last]));
      i = last + 1;
    } else {
      parts.push_back(std::to_string(ranks[i]));
      ++i;
    }
  }
  std::string words = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t p = 0; p < parts.size(); ++p)
    words += (p == 0 ? "" : p + 1 == parts.size() ? " and " : ", ") + parts[p];
  return words;
}

class stall_watch {
 public:
  explicit stall_watch(int ranks)
      : ranks_(static_cast<std::size_t>(ranks)),
        running_(ranks),
        earlier_(static_cast<std::size_t>(ranks), none),
        later_(static_cast<std::size_t>(ranks), none) {}

  // Each says whether this event completes a stall (true once per run); describe() then says how.
  bool asleep(int rank, std::string_view call, const std::atomic<std::uint32_t>& counter, std::uint32_t target) {
    std::lock_guard lock(lock_);
    ranks_[static_cast<std::size_t>(rank)] = {state::asleep, call, &counter, target};
    fall_asleep(rank);
    --running_;
    return stalled();
  }
  void awake(int rank) {
    std::lock_guard lock(lock_);
    ranks_[static_cast<std::size_t>(rank)].now = state::running;
    wake(rank);
    ++running_;
  }
  bool returned(int rank) {
    std::lock_guard lock(lock_);
    ranks_[static_cast<std::size_t>(rank)].now = state::returned;
    --running_;
    return stalled();
  }

  // "deadlock: rank 0 waits in all_gather, and ranks 1, 2 and 3 have returned from their bodies; no
  // rank can go on", as the ranks were when the stall completed.
  std::string describe() {
    std::lock_guard lock(lock_);
    std::vector<int> gone;
    std::vector<std::pair<std::string_view, std::vector<int>>> waiting;  // by call, in order of first rank
    for (std::size_t r = 0; r < ranks_.size(); ++r) {
      const rank_now& rank = ranks_[r];
      if (rank.now == state::returned) {
        gone.push_back(static_cast<int>(r));
        continue;
      }
      auto same = std::find_if(waiting.begin(), waiting.end(), [&](const auto& w) { return w.first == rank.call; });
      if (same == waiting.end()) same = waiting.insert(waiting.end(), {rank.call, {}});
      same->second.push_back(static_cast<int>(r));
    }
    std::string how = "deadlock: ";
    for (std::size_t w = 0; w < waiting.size(); ++w) {
      const auto& [call, ranks] = waiting[w];
      how += (w == 0 ? "" : ", ") + ranks_in_words(ranks) + (ranks.size() == 1 ? " waits in " : " wait in ");
      how += call;
    }
    if (!gone.empty())
      how += ", and " + ranks_in_words(gone) +
             (gone.size() == 1 ? " has returned from its body" : " have returned from their bodies");
    return how + "; no rank can go on";
  }

 private:
  enum class state { running, asleep, returned };
  struct rank_now {
    state now = state::running;
    std::string_view call;
    const std::atomic<std::uint32_t>* counter = nullptr;  // while asleep: alive, as its sleeper waits on it
    std::uint32_t target = 0;
  };

  // None runs, some sleep, and no sleeper's count has reached its target or been aborted (such a
  // sleeper is about to wake and run). Once true, the ranks stay as they are until the abort wakes
  // them. The longest asleep are looked at first: in a run that goes on, one of them is usually the
  // sleeper about to wake, so a look costs little even among thousands of fibers.
  bool stalled() noexcept {
    if (running_ > 0 || stalled_ || first_asleep_ == none) return false;
    for (int r = first_asleep_; r != none; r = later_[static_cast<std::size_t>(r)]) {
      const rank_now& rank = ranks_[static_cast<std::size_t>(r)];
      if (shardwise::detail::settled(rank.counter->load(std::memory_order_acquire), rank.target)) return false;
    }
    stalled_ = true;
    return true;
  }

  // The sleepers, in the order they fell asleep: a list through earlier_ and later_.
  void fall_asleep(int rank) noexcept {
    earlier_[static_cast<std::size_t>(rank)] = last_asleep_;
    later_[static_cast<std::size_t>(rank)] = none;
    (last_asleep_ == none ? first_asleep_ : later_[static_cast<std::size_t>(last_asleep_)]) = rank;
    last_asleep_ = rank;
  }
  void wake(int rank) noexcept {
    const int earlier = earlier_[static_cast<std::size_t>(rank)];
    const int later = later_[static_cast<std::size_t>(rank)];
    (earlier == none ? first_asleep_ : later_[static_cast<std::size_t>(earlier)]) = later;
    (later == none ? last_asleep_ : earlier_[static_cast<std::size_t>(later)]) = earlier;
  }

  static constexpr int none = -1;
  shardwise::detail::spin_lock lock_;  // held for a few instructions, except while a stall is described
  std::vector<rank_now> ranks_;        // by world rank
  int running_;
  bool stalled_ = false;
  std::vector<int> earlier_, later_;  // by world rank, while asleep
  int first_asleep_ = none;
  int last_asleep_ = none;
};

}  // namespace shardwise::threads::detail
