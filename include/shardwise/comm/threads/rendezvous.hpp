#pragma once
// Where the ranks of a group meet for one collective. Every collective a communicator issues gets a
// sequence number; the ranks meet in one `operation` per number, where each rank posts a pointer to
// its call descriptor (its spans) and its signature. Once all have posted, the collective runs in
// phases: in each, every rank does its share of the data movement, reading its peers' posted
// descriptors directly, then arrives; the next phase begins when all have arrived, so the arrivals are
// a barrier between phases (a barrier call is a collective of no phase: meeting is all it does).
// A rank leaves once every rank has finished the last phase, so no peer still reads its buffers.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "shardwise/comm/agreement.hpp"
#include "shardwise/comm/calls.hpp"
#include "shardwise/comm/detail/blocking_wait.hpp"

namespace shardwise::threads::detail {

// What a rank posted to a collective: its call descriptor, and its signature for checking that every
// rank called the same thing. The signature is a copy: a barrier's ranks may leave (and destroy their
// calls) while others still compare.
struct slot {
  const void* call = nullptr;
  agreement::signature signature;
};

struct operation {
  explicit operation(int ranks) : slots(static_cast<std::size_t>(ranks)) {}
  std::vector<slot> slots;
  std::atomic<std::uint32_t> posted{0};
  // Arrivals at the ends of phases, counted together: phase k (from 0) has ended for everyone once
  // (k + 1) · ranks have arrived, since nobody arrives for phase k + 1 before phase k has ended.
  std::atomic<std::uint32_t> finished{0};
  std::atomic<std::uint32_t> working{0};  // ranks inside a read/write section right now
  std::atomic<std::uint32_t> released{0};

  // Ready for the next collective that meets here (every rank has left this one).
  void reset() noexcept {
    posted.store(0, std::memory_order_relaxed);
    finished.store(0, std::memory_order_relaxed);
    working.store(0, std::memory_order_relaxed);
    released.store(0, std::memory_order_relaxed);
  }

  void abort() noexcept {
    shardwise::detail::mark_aborted(posted);
    shardwise::detail::mark_aborted(finished);
  }
};

// Rank s's call descriptor in an operation whose calls are of type Call.
template <class Call>
const Call& peer(const operation& op, int s) {
  return *static_cast<const Call*>(op.slots[static_cast<std::size_t>(s)].call);
}

// How many phases a collective needs (each a share of the data movement and a barrier); a call
// descriptor whose count depends on its arguments provides phases_of(call) of its own.
template <class Call>
int phases_of(const Call&) {
  return 1;
}
inline int phases_of(const calls::barrier&) { return 0; }
inline void perform(calls::barrier&, const operation&, int, int, int) {}

// What a rank does with its own buffers before it posts its descriptor, for the calls that need it (a
// specialisation each); nothing for the others.
template <class Call>
struct own_buffers {
  void prepare(Call&) {}
};

}  // namespace shardwise::threads::detail
