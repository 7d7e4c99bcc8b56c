#pragma once
// threads::communicator: one rank's handle on a group of threads (comm/threads/group.hpp). The
// collectives it issues are numbered in order and meet in the group (comm/threads/collective.hpp),
// and finish in that order (comm/threads/in_flight.hpp); its sends and receives meet in mailboxes
// (comm/threads/mailbox.hpp).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "shardwise/comm/communicator.hpp"
#include "shardwise/comm/detail/backend_hooks.hpp"
#include "shardwise/comm/threads/collective.hpp"
#include "shardwise/comm/threads/group.hpp"
#include "shardwise/comm/threads/in_flight.hpp"
#include "shardwise/comm/threads/mailbox.hpp"
#include "shardwise/comm/threads/request.hpp"
#include "shardwise/core/error.hpp"

namespace shardwise::threads {

class communicator : public communicator_interface<communicator> {
 public:
  using request = threads::request;

  communicator(std::shared_ptr<detail::group> members, int rank) : group_(std::move(members)), rank_(rank) {}
  communicator(const communicator&) = delete;
  communicator& operator=(const communicator&) = delete;
  communicator(communicator&&) noexcept = default;
  communicator& operator=(communicator&&) noexcept = default;
  ~communicator() = default;

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return group_->size(); }
  [[nodiscard]] int world_rank() const noexcept { return group_->world_ranks[static_cast<std::size_t>(rank_)]; }

  // Ranks passing the same colour form a communicator, ordered by key and then by rank. Collective.
  [[nodiscard]] communicator split(int color, int key) {
    if (color < 0) throw argument_error(world_rank(), "split", "colour " + std::to_string(color) + " is negative");
    in_flight_->finish_before(nullptr, true);
    detail::collective<detail::split_call> mine(
        detail::split_call{.color = color, .key = key, .parent = group_, .members = {}, .created = {}}, group_, rank_,
        next_collective_++);
    mine.progress(true);
    const auto& members = mine.call().members;
    const auto position = std::find(members.begin(), members.end(), rank_) - members.begin();
    return communicator(mine.call().created, static_cast<int>(position));
  }

 private:
  friend struct shardwise::detail::backend_hooks;

  // A blocking call ends before this communicator can, so it borrows the group: a shared_ptr without
  // an owner, whose copies leave the reference count alone (an atomic every rank would contend for).
  template <class Call>
  void run(const Call& call) {
    in_flight_->finish_before(nullptr, true);
    detail::collective<Call> mine(call, std::shared_ptr<detail::group>(std::shared_ptr<detail::group>{}, group_.get()),
                                  rank_, next_collective_++);
    mine.progress(true);
  }
  template <class Call>
  [[nodiscard]] request start(const Call& call) {
    return request(std::make_unique<detail::collective<Call>>(call, group_, rank_, next_collective_++, in_flight_));
  }

  // A blocking send returns at once: it copies straight into a waiting receive, or leaves a copy.
  template <class T>
  void run(const calls::send<T>& call) {
    auto outgoing = message_for(call);
    mailbox_of(call.destination).deliver_or_post(outgoing, /*keep_copy=*/true);
  }
  // isend copies nothing: the receiver reads this rank's buffer, so keep it alive until wait().
  template <class T>
  [[nodiscard]] request start(const calls::send<T>& call) {
    auto outgoing = message_for(call);
    outgoing.delivered = std::make_shared<std::atomic<std::uint32_t>>(0);
    auto delivered = outgoing.delivered;
    mailbox_of(call.destination).deliver_or_post(outgoing, /*keep_copy=*/false);
    return request(std::make_unique<detail::transfer_wait>(group_->run, group_->mailboxes[index(call.destination)],
                                                           std::move(delivered), nullptr, world_rank(), "isend",
                                                           waits_in("isend to", call.destination, call.tag)));
  }
  template <class T>
  void run(const calls::recv<T>& call) {
    start(call).wait();
  }
  template <class T>
  [[nodiscard]] request start(const calls::recv<T>& call) {
    if (group_->run->aborted.load()) detail::throw_stopped(*group_->run, world_rank(), "recv");
    auto wanted = std::make_shared<detail::posted_receive>();
    wanted->source = call.source;
    wanted->tag = call.tag;
    wanted->sequence = received_[{call.source, call.tag}]++;
    wanted->data = reinterpret_cast<std::byte*>(call.data.data());
    wanted->bytes = call.data.size_bytes();
    mailbox_of(rank_).receive_or_post(wanted);
    auto flag = std::shared_ptr<std::atomic<std::uint32_t>>(wanted, &wanted->done);
    return request(std::make_unique<detail::transfer_wait>(group_->run, group_->mailboxes[index(rank_)],
                                                           std::move(flag), std::move(wanted), world_rank(), "recv",
                                                           waits_in("recv from", call.source, call.tag)));
  }
  // "recv from rank 2 with tag 6", the peer by its world rank, as every message names ranks.
  [[nodiscard]] std::string waits_in(std::string_view what, int peer, int tag) const {
    return std::string(what) + " rank " + std::to_string(group_->world_ranks[index(peer)]) + " with tag " +
           std::to_string(tag);
  }

  template <class T>
  detail::message message_for(const calls::send<T>& call) {
    if (group_->run->aborted.load()) detail::throw_stopped(*group_->run, world_rank(), "send");
    detail::message outgoing;
    outgoing.source = rank_;
    outgoing.tag = call.tag;
    outgoing.sequence = sent_[{call.destination, call.tag}]++;
    outgoing.data = reinterpret_cast<const std::byte*>(call.data.data());
    outgoing.bytes = call.data.size_bytes();
    return outgoing;
  }
  static std::size_t index(int rank) { return static_cast<std::size_t>(rank); }
  detail::mailbox& mailbox_of(int rank) { return *group_->mailboxes[index(rank)]; }

  std::shared_ptr<detail::group> group_;
  int rank_;
  std::uint64_t next_collective_ = 0;
  std::shared_ptr<detail::in_flight> in_flight_ = std::make_shared<detail::in_flight>();
  std::map<std::pair<int, int>, std::uint64_t> sent_;
  std::map<std::pair<int, int>, std::uint64_t> received_;
};

static_assert(shardwise::communicator<communicator>, "threads::communicator must model shardwise::communicator");

}  // namespace shardwise::threads
