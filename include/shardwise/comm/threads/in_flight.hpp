#pragma once
// The collectives one rank has started on one communicator and not yet finished, oldest first. The
// threads backend moves a collective's data only inside its ranks' own calls, so a rank that waits
// for a collective, or makes a blocking one, first finishes those it started before: every rank then
// finishes them in the order all of them started them. Ranks that wait in different orders can thus
// never each wait for a collective the other has not reached, which MPI's progress rule ensures too.
#include <algorithm>
#include <cstddef>
#include <vector>

namespace shardwise::threads::detail {

// A started collective as the list drives it: as far as it goes (or to its end, `block`), keeping any
// error for its own wait() to report.
class catching_up {
 public:
  catching_up() = default;
  catching_up(const catching_up&) = delete;
  catching_up& operator=(const catching_up&) = delete;
  virtual void catch_up(bool block) noexcept = 0;

 protected:
  ~catching_up() = default;
};

class in_flight {
 public:
  void add(catching_up& started) { started_.push_back(&started); }
  void remove(const catching_up& finished) noexcept {
    const auto it = std::find(started_.begin(), started_.end(), &finished);
    if (it != started_.end()) started_.erase(it);
  }

  // Drives the collectives started before `until` (every one when it is null; none when it has
  // finished already). A finished one takes itself off the list, so the walk looks again where it is.
  void finish_before(const catching_up* until, bool block) {
    if (until != nullptr && std::find(started_.begin(), started_.end(), until) == started_.end()) return;
    for (std::size_t i = 0; i < started_.size() && started_[i] != until;) {
      catching_up* earlier = started_[i];
      earlier->catch_up(block);
      if (i < started_.size() && started_[i] == earlier) ++i;  // not finished yet (only without blocking)
    }
  }

 private:
  std::vector<catching_up*> started_;
};

}  // namespace shardwise::threads::detail
