#pragma once
// Point to point in the threads backend. Sends and receives meet in the receiver's mailbox, matched by
// (source, tag, sequence number), so messages between a pair with one tag arrive in the order they
// were sent and receives match in the order they were posted. Whichever side comes second copies the
// data straight from the sender's buffer into the receiver's; only a blocking send that finds no
// receive waiting leaves a copy behind (so it returns at once, like MPI's eager sends).
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "shardwise/comm/detail/blocking_wait.hpp"
#include "shardwise/comm/threads/failure.hpp"
#include "shardwise/comm/threads/request.hpp"
#include "shardwise/core/error.hpp"

namespace shardwise::threads::detail {

using shardwise::detail::mark_aborted;
using shardwise::detail::wait_until;

struct message {
  int source = 0;
  int tag = 0;
  std::uint64_t sequence = 0;
  const std::byte* data = nullptr;
  std::size_t bytes = 0;
  std::vector<std::byte> copy;
  std::shared_ptr<std::atomic<std::uint32_t>> delivered;  // isend only: raised once copied out
};

struct posted_receive {
  int source = 0;
  int tag = 0;
  std::uint64_t sequence = 0;
  std::byte* data = nullptr;
  std::size_t bytes = 0;
  std::size_t sent_bytes = 0;  // the size of the message that arrived, written before `done`
  std::atomic<std::uint32_t> done{0};
};

inline bool matches(const message& sent, const posted_receive& wanted) {
  return sent.source == wanted.source && sent.tag == wanted.tag && sent.sequence == wanted.sequence;
}

// Copies a matched message into its receive (only when the sizes agree; the receiver reports it
// otherwise) and raises both sides' flags.
inline void transfer(const message& sent, posted_receive& wanted) {
  wanted.sent_bytes = sent.bytes;
  if (sent.bytes == wanted.bytes && sent.bytes != 0) std::memcpy(wanted.data, sent.data, sent.bytes);
  if (sent.delivered) {
    sent.delivered->fetch_add(1);
    sent.delivered->notify_all();
  }
  wanted.done.fetch_add(1);
  wanted.done.notify_all();
}

struct mailbox {
  std::mutex mutex;
  std::list<message> messages;                          // sent, not yet received
  std::list<std::shared_ptr<posted_receive>> receives;  // posted, not yet matched

  // Copies into a matching posted receive if there is one; otherwise leaves the message here, with a
  // copy of the data when the sender will not keep its buffer.
  void deliver_or_post(message& outgoing, bool keep_copy) {
    std::shared_ptr<posted_receive> wanted;
    {
      std::lock_guard lock(mutex);
      const auto it = std::find_if(receives.begin(), receives.end(),
                                   [&](const auto& receive) { return matches(outgoing, *receive); });
      if (it == receives.end()) {
        if (keep_copy) {
          outgoing.copy.assign(outgoing.data, outgoing.data + outgoing.bytes);
          outgoing.data = outgoing.copy.data();
        }
        messages.push_back(std::move(outgoing));
        return;
      }
      wanted = *it;
      receives.erase(it);
    }
    transfer(outgoing, *wanted);
  }

  // Takes the matching message if it has arrived (and copies it in), or leaves the receive posted.
  void receive_or_post(const std::shared_ptr<posted_receive>& wanted) {
    std::optional<message> arrived;
    {
      std::lock_guard lock(mutex);
      const auto it =
          std::find_if(messages.begin(), messages.end(), [&](const message& sent) { return matches(sent, *wanted); });
      if (it != messages.end()) {
        arrived = std::move(*it);
        messages.erase(it);
      } else {
        receives.push_back(wanted);
      }
    }
    if (arrived) transfer(*arrived, *wanted);
  }

  // Takes an entry back out if nobody has matched it yet; true if it was still there.
  template <class Entry, class Same>
  bool withdraw_from(std::list<Entry>& entries, const Same& same) {
    std::lock_guard lock(mutex);
    for (auto it = entries.begin(); it != entries.end(); ++it)
      if (same(*it)) {
        entries.erase(it);
        return true;
      }
    return false;
  }

  void abort() noexcept {
    std::lock_guard lock(mutex);
    for (auto& sent : messages)
      if (sent.delivered) mark_aborted(*sent.delivered);
    for (auto& wanted : receives) mark_aborted(wanted->done);
  }
};

// Waits for a flag raised by the other side of a transfer. If the run aborts first, the entry is
// withdrawn, or, when the other side already holds it, its copy (which never blocks) is let finish.
// `waits_in` is how a deadlock names the wait: the peer and the tag ("recv from rank 2 with tag 6"),
// which tell a tag or a source that no send matches.
class transfer_wait final : public pending {
 public:
  transfer_wait(std::shared_ptr<context> run, std::shared_ptr<mailbox> box,
                std::shared_ptr<std::atomic<std::uint32_t>> flag, std::shared_ptr<posted_receive> receive,
                int world_rank, std::string_view name, std::string waits_in)
      : run_(std::move(run)),
        box_(std::move(box)),
        flag_(std::move(flag)),
        receive_(std::move(receive)),
        world_rank_(world_rank),
        name_(name),
        waits_in_(std::move(waits_in)) {}
  ~transfer_wait() override { abandon(); }

  bool progress(bool block) override {
    if (done_) return true;
    if (!wait_until(*flag_, 1, block, run_->waiter(world_rank_, waits_in_))) {
      if ((flag_->load() & shardwise::detail::aborted_bit) == 0) return false;
      withdraw();
      throw_stopped(*run_, world_rank_, name_);
    }
    done_ = true;
    if (receive_ && receive_->sent_bytes != receive_->bytes)
      throw argument_error(world_rank_, name_,
                           "rank " + std::to_string(receive_->source) + " sent " +
                               std::to_string(receive_->sent_bytes) + " bytes with tag " +
                               std::to_string(receive_->tag) + ", the receive buffer holds " +
                               std::to_string(receive_->bytes) + " bytes");
    return true;
  }
  void abandon() noexcept override {
    if (done_) return;
    run_->failing(world_rank_);
    withdraw();
  }
  void failed_unwaited(std::exception_ptr error) noexcept override { run_->failing(world_rank_, std::move(error)); }

 private:
  void withdraw() noexcept {
    done_ = true;
    const bool withdrawn =
        receive_ ? box_->withdraw_from(box_->receives, [&](const auto& wanted) { return wanted == receive_; })
                 : box_->withdraw_from(box_->messages, [&](const message& sent) { return sent.delivered == flag_; });
    if (withdrawn) return;
    while ((flag_->load() & ~shardwise::detail::aborted_bit) == 0) shardwise::detail::let_others_run();
  }

  std::shared_ptr<context> run_;
  std::shared_ptr<mailbox> box_;  // the receiver's: where the entry waits
  std::shared_ptr<std::atomic<std::uint32_t>> flag_;
  std::shared_ptr<posted_receive> receive_;  // set for receives: the flag is its `done`
  int world_rank_;
  std::string_view name_;
  std::string waits_in_;  // the stall watch holds a view of it while this waits
  bool done_ = false;
};

}  // namespace shardwise::threads::detail
