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
#include "shardwise/comm/threads/failure.hpp"
#include "shardwise/comm/threads/mailbox.hpp"
#include "shardwise/comm/threads/rendezvous.hpp"

namespace shardwise::threads::detail {

struct group final : abortable {
  group(std::shared_ptr<context> run_context, std::vector<int> world_ranks_of_members)
      : run(std::move(run_context)), world_ranks(std::move(world_ranks_of_members)) {
    for (std::size_t r = 0; r < world_ranks.size(); ++r) mailboxes.push_back(std::make_shared<mailbox>());
  }
  [[nodiscard]] int size() const noexcept { return static_cast<int>(world_ranks.size()); }
  [[nodiscard]] std::uint32_t ranks() const noexcept { return static_cast<std::uint32_t>(world_ranks.size()); }

  // Posts this rank's descriptor to collective number `sequence`, creating it if this rank is first.
  std::shared_ptr<operation> join(std::uint64_t sequence, int rank, slot posted, std::string_view name) {
    std::shared_ptr<operation> op;
    {
      // The abort flag is read under the same lock the abort scan takes, so an operation is either
      // refused here or seen (and woken) by the scan.
      std::lock_guard lock(mutex);
      if (run->aborted.load()) throw_peer_failure(*run, world_ranks[static_cast<std::size_t>(rank)], name);
      auto& entry = operations[sequence];
      if (!entry) entry = std::make_shared<operation>(size());
      entry->slots[static_cast<std::size_t>(rank)] = posted;
      op = entry;
    }
    shardwise::detail::arrive(op->posted, ranks());
    return op;
  }

  void leave(std::uint64_t sequence, operation& op) {
    if (op.released.fetch_add(1, std::memory_order_acq_rel) + 1 == ranks()) {
      std::lock_guard lock(mutex);
      operations.erase(sequence);
    }
  }

  void abort() noexcept override {
    std::lock_guard lock(mutex);
    for (auto& [sequence, op] : operations) op->abort();
    for (auto& box : mailboxes) box->abort();
  }

  std::shared_ptr<context> run;
  std::vector<int> world_ranks;
  std::mutex mutex;
  std::unordered_map<std::uint64_t, std::shared_ptr<operation>> operations;
  std::vector<std::shared_ptr<mailbox>> mailboxes;
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
