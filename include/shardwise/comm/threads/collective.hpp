#pragma once
// One rank's part in one collective of the threads backend: post the call descriptor to the group's
// meeting point (comm/threads/rendezvous.hpp), check that every rank called the same thing
// (comm/agreement.hpp) before any data moves, do this rank's share of each phase (perform(), found for
// the call's type: comm/threads/direct_collectives.hpp, or the split of comm/threads/group.hpp), and
// leave once every rank has finished. Blocking calls run it to the end at once; started ones inside
// wait()/test().
#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "shardwise/comm/agreement.hpp"
#include "shardwise/comm/detail/blocking_wait.hpp"
#include "shardwise/comm/threads/direct_collectives.hpp"
#include "shardwise/comm/threads/failure.hpp"
#include "shardwise/comm/threads/group.hpp"
#include "shardwise/comm/threads/in_flight.hpp"
#include "shardwise/comm/threads/rendezvous.hpp"
#include "shardwise/comm/threads/request.hpp"
#include "shardwise/core/error.hpp"

namespace shardwise::threads::detail {

using agreement::signature_of;
using shardwise::detail::arrive;

// What every rank must agree on (comm/agreement.hpp), checked once all have posted.
template <class Call>
std::optional<std::string> disagreement(const Call& mine, const operation& op, const group& members, int rank) {
  const int ranks = members.size();
  const auto signature_at = [&](int s) -> const agreement::signature& {
    return op.slots[static_cast<std::size_t>(s)].signature;
  };
  if (auto problem = agreement::disagreement(rank, ranks, signature_at)) return problem;
  if constexpr (requires { mine.send_counts; }) {
    return agreement::count_disagreement(
        ranks, [&](int s, int r) { return peer<Call>(op, s).send_counts[static_cast<std::size_t>(r)]; },
        [&](int r, int s) { return peer<Call>(op, r).receive_counts[static_cast<std::size_t>(s)]; },
        [&](int s) { return members.world_ranks[static_cast<std::size_t>(s)]; });
  }
  return std::nullopt;
}

// Not movable: peers read the descriptor through its address. A started one is on its rank's list
// of collectives in flight (comm/threads/in_flight.hpp) until it finishes.
template <class Call>
class collective final : public pending, public catching_up {
 public:
  collective(const Call& call, std::shared_ptr<group> members, int rank, std::uint64_t sequence,
             std::shared_ptr<in_flight> started_on = nullptr)
      : call_(call),
        group_(std::move(members)),
        rank_(rank),
        sequence_(sequence),
        phases_(phases_of(call_)),
        in_flight_(std::move(started_on)) {
    own_.prepare(call_);
    op_ = &group_->join(sequence_, rank_, slot{&call_, signature()}, Call::name);
    if (in_flight_) in_flight_->add(*this);
  }
  ~collective() override {
    if (!released_) abandon();
  }

  // wait() and test(): the collectives this rank started before this one first.
  bool progress(bool block) override {
    if (in_flight_) in_flight_->finish_before(this, block);
    if (caught_error_) std::rethrow_exception(std::exchange(caught_error_, nullptr));
    return advance_own_part(block);
  }

  void catch_up(bool block) noexcept override {
    try {
      advance_own_part(block);
    } catch (...) {
      caught_error_ = std::current_exception();
    }
  }

  void abandon() noexcept override {
    if (released_) return;
    group_->run->failing(world_rank());
    drain_and_release();
  }

  Call& call() noexcept { return call_; }

  // A request dropped before it finished, whose error its destructor cannot throw: the run reports it.
  void failed_unwaited(std::exception_ptr error) noexcept override {
    group_->run->failing(world_rank(), std::move(error));
  }

 private:
  // Started ones are on a rank's list in flight; blocking ones are not.
  [[nodiscard]] agreement::signature signature() const {
    agreement::signature mine = signature_of(call_, world_rank());
    mine.started = in_flight_ ? 1 : 0;
    return mine;
  }

  bool advance_own_part(bool block) {
    if (released_) return true;  // finished, by an earlier wait or a later collective's catching up
    const std::uint32_t ranks = group_->ranks();
    if (phase_ < 0) {
      if (!advance(op_->posted, ranks, block)) return false;
      if (auto problem = disagreement(call_, *op_, *group_, rank_)) {
        // Every rank finds a disagreement (each compares all), so all meet here once more: nobody may
        // leave while another still reads its descriptor.
        arrive(op_->finished, ranks);
        shardwise::detail::wait_until(op_->finished, ranks, true, group_->run->waiter(world_rank(), Call::name));
        drain_and_release();
        throw argument_error(world_rank(), Call::name, *problem);
      }
      phase_ = 0;
    }
    for (; phase_ < phases_; ++phase_) {
      if (!worked_) {
        work(phase_);
        worked_ = true;
        arrive(op_->finished, ended_by(phase_));
      }
      if (!advance(op_->finished, ended_by(phase_), block)) return false;
      worked_ = false;
    }
    release();
    return true;
  }

  [[nodiscard]] int world_rank() const { return group_->world_ranks[static_cast<std::size_t>(rank_)]; }

  // The count of arrivals at which phase `phase` has ended for every rank (operation::finished).
  [[nodiscard]] std::uint32_t ended_by(int phase) const {
    return group_->ranks() * static_cast<std::uint32_t>(phase + 1);
  }

  // false: not yet. Throws why the run stopped (peer_error, deadlock_error) once peers can no longer
  // touch this rank's buffers.
  bool advance(const std::atomic<std::uint32_t>& counter, std::uint32_t target, bool block) {
    if (shardwise::detail::wait_until(counter, target, block, group_->run->waiter(world_rank(), Call::name)))
      return true;
    if ((counter.load() & shardwise::detail::aborted_bit) == 0) return false;
    drain_and_release();
    throw_stopped(*group_->run, world_rank(), Call::name);
  }

  // Enter a read/write section only while the run is alive; an aborting peer waits for `working` to
  // drop to zero before it lets its buffers go (the increment is ordered before the flag check).
  void work(int phase) {
    op_->working.fetch_add(1);
    if (group_->run->aborted.load()) {
      op_->working.fetch_sub(1);
      drain_and_release();
      throw_stopped(*group_->run, world_rank(), Call::name);
    }
    perform(call_, *op_, rank_, group_->size(), phase);
    op_->working.fetch_sub(1);
  }

  void drain_and_release() noexcept {
    while (op_->working.load() != 0) shardwise::detail::let_others_run();
    release();
  }

  void release() noexcept {
    if (released_) return;
    released_ = true;
    group_->leave(sequence_, *op_);
    if (in_flight_) in_flight_->remove(*this);
  }

  Call call_;
  std::shared_ptr<group> group_;
  int rank_;
  std::uint64_t sequence_;
  int phases_;
  operation* op_ = nullptr;  // owned by the group, which outlives this rank's part
  int phase_ = -1;           // -1: waiting for every rank to post; then the phase under way
  bool worked_ = false;
  bool released_ = false;
  std::shared_ptr<in_flight> in_flight_;  // null for a blocking call
  std::exception_ptr caught_error_;       // met while catching up, for this collective's own wait()
  own_buffers<Call> own_;
};

}  // namespace shardwise::threads::detail
