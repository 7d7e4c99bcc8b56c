#pragma once
// The ranks of one threads communicator (the world, or a split of it): their world ranks, the
// collectives they are meeting in (comm/threads/rendezvous.hpp) and their mailboxes
// (comm/threads/mailbox.hpp). A split is a collective of two phases that makes a new group.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "shardwise/comm/agreement.hpp"
#include "shardwise/comm/calls.hpp"
#include "shardwise/comm/detail/spin_lock.hpp"
#include "shardwise/comm/threads/failure.hpp"
#include "shardwise/comm/threads/mailbox.hpp"
#include "shardwise/comm/threads/rendezvous.hpp"

namespace shardwise::threads::detail {

struct group final : abortable {
  group(std::shared_ptr<context> run_context, std::vector<int> world_ranks_of_members)
      : run(std::move(run_context)), world_ranks(std::move(world_ranks_of_members)) {
    for (std::size_t r = 0; r < world_ranks.size(); ++r) mailboxes.push_back(std::make_shared<mailbox>());
    for (std::uint64_t c = 0; c < cells; ++c) ring.push_back(std::make_unique<cell>(size(), c));
  }
  [[nodiscard]] int size() const noexcept { return static_cast<int>(world_ranks.size()); }
  [[nodiscard]] std::uint32_t ranks() const noexcept { return static_cast<std::uint32_t>(world_ranks.size()); }

  // Posts this rank's descriptor to collective number `sequence`. It meets in ring cell sequence %
  // cells when that cell serves it, with no lock; otherwise (a rank has started more collectives than
  // there are cells, and the cell still holds an earlier one) in an operation of its own, looked up
  // under the lock. Whether a sequence overflows is decided under the lock too, by whichever comes
  // first of its first overflowing rank and the cell's release, so all its ranks meet in one place.
  operation& join(std::uint64_t sequence, int rank, slot posted, std::string_view name) {
    operation* op = served_by_ring(sequence);
    if (op != nullptr) {
      // An abort after this check marks the cell's counters, which this rank then waits on.
      if (run->aborted.load()) throw_stopped(*run, world_ranks[static_cast<std::size_t>(rank)], name);
    } else {
      // The abort flag is read under the same lock the abort scan takes, so an operation is either
      // refused here or seen (and woken) by the scan.
      std::lock_guard lock(table_lock);
      if (run->aborted.load()) throw_stopped(*run, world_ranks[static_cast<std::size_t>(rank)], name);
      op = served_by_ring(sequence);
      if (op == nullptr) {
        auto& entry = overflowed[sequence];
        if (!entry.op) entry.op = std::make_unique<operation>(size());
        op = entry.op.get();
      }
    }
    op->slots[static_cast<std::size_t>(rank)] = posted;
    shardwise::detail::arrive(op->posted, ranks());
    return *op;
  }

  // The last rank to leave hands the cell on to the next sequence that has not overflowed, or lets
  // its overflowed operation go once the cell has moved past it (until then the cell must skip it).
  void leave(std::uint64_t sequence, operation& op) {
    if (op.released.fetch_add(1, std::memory_order_acq_rel) + 1 != ranks()) return;
    cell& home = *ring[sequence % cells];
    std::lock_guard lock(table_lock);
    if (&op != &home.op) {
      if (home.serving.load() > sequence) {
        overflowed.erase(sequence);
      } else {
        overflowed[sequence].done = true;
      }
      return;
    }
    op.reset();
    if (run->aborted.load()) op.abort();  // an abort may have marked the counters just reset
    std::uint64_t next = sequence + cells;
    for (auto it = overflowed.find(next); it != overflowed.end(); it = overflowed.find(next)) {
      if (it->second.done) overflowed.erase(it);
      next += cells;
    }
    home.serving.store(next, std::memory_order_release);
  }

  void abort() noexcept override {
    std::lock_guard lock(table_lock);
    for (auto& c : ring) c->op.abort();
    for (auto& [sequence, entry] : overflowed) entry.op->abort();
    for (auto& box : mailboxes) box->abort();
  }

  std::shared_ptr<context> run;
  std::vector<int> world_ranks;
  std::vector<std::shared_ptr<mailbox>> mailboxes;

 private:
  // Enough for the collectives a rank keeps started at once (the pipelines of ops/ start a few);
  // each cell holds a slot per rank, so more would cost memory in simulations of thousands of ranks.
  static constexpr std::uint64_t cells = 16;
  struct cell {
    cell(int ranks, std::uint64_t first) : op(ranks), serving(first) {}
    operation op;
    std::atomic<std::uint64_t> serving;  // the sequence whose ranks meet here, now or next
  };
  struct overflow_entry {
    std::unique_ptr<operation> op;
    bool done = false;  // every rank has left; kept so the cell skips this sequence
  };

  operation* served_by_ring(std::uint64_t sequence) {
    cell& home = *ring[sequence % cells];
    return home.serving.load(std::memory_order_acquire) == sequence ? &home.op : nullptr;
  }

  shardwise::detail::spin_lock table_lock;  // guards `overflowed` and the cells' hand-over
  std::vector<std::unique_ptr<cell>> ring;
  std::unordered_map<std::uint64_t, overflow_entry> overflowed;
};

inline std::shared_ptr<group> make_group(const std::shared_ptr<context>& run, std::vector<int> world_ranks) {
  auto created = std::make_shared<group>(run, std::move(world_ranks));
  run->enroll(created);
  return created;
}

// split(color, key): phase 0, the first member of each colour creates the group; phase 1, the others
// pick it up.
struct split_call {
  static constexpr std::string_view name = "split";
  int color = 0;
  int key = 0;
  std::shared_ptr<group> parent;
  std::vector<int> members;  // parent ranks of my new group, in new-rank order
  std::shared_ptr<group> created;
};

inline void perform(split_call& mine, const operation& op, int rank, int ranks, int phase) {
  if (phase == 0) {
    std::vector<std::pair<int, int>> order;  // (key, parent rank) of my colour
    for (int s = 0; s < ranks; ++s) {
      const auto& other = peer<split_call>(op, s);
      if (other.color == mine.color) order.emplace_back(other.key, s);
    }
    std::sort(order.begin(), order.end());
    for (const auto& [key, s] : order) mine.members.push_back(s);
    if (mine.members.front() == rank) {
      std::vector<int> world_ranks;
      for (const int s : mine.members) world_ranks.push_back(mine.parent->world_ranks[static_cast<std::size_t>(s)]);
      mine.created = make_group(mine.parent->run, std::move(world_ranks));
    }
    return;
  }
  if (mine.members.front() != rank) mine.created = peer<split_call>(op, mine.members.front()).created;
}
inline int phases_of(const split_call&) { return 2; }
inline agreement::signature signature_of(const split_call&, int world_rank) {
  return agreement::signature_of(calls::split{}, world_rank);
}

}  // namespace shardwise::threads::detail
