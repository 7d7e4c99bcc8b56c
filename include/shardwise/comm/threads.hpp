#pragma once
// The shared-memory backend: P ranks as threads of one process (`threads::run(P, body)`).
//
// How a collective works here. Every collective a communicator issues gets a sequence number; the
// ranks meet in one `operation` per number, where each rank posts a pointer to its call descriptor
// (its spans). Once all have posted, each rank does its share of the data movement by reading its
// peers' buffers directly (no staging copies), then waits until every peer has finished reading its
// own buffers before it returns. In an all-reduce rank r reduces chunk r of every input and writes
// the result into every rank's output, so the reduction work is spread evenly and every byte is read
// and written once, in one round.
//
// Non-blocking forms post at once and do their share inside wait()/test(), so several collectives
// can be outstanding. Before any data moves, every rank checks that all called the same collective
// with the same element type, count, root and reduction (comm/agreement.hpp). If any rank's body
// throws, the run is aborted: every rank blocked in (or later entering) a call throws peer_error
// ("stopped because rank R failed: …"), and run() rethrows the error of the rank that failed first,
// never one of the peer_errors it caused.
#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "shardwise/comm/agreement.hpp"
#include "shardwise/comm/communicator.hpp"
#include "shardwise/comm/detail/blocking_wait.hpp"
#include "shardwise/comm/detail/streaming_store.hpp"
#include "shardwise/comm/shared_memory.hpp"
#include "shardwise/core/error.hpp"

namespace shardwise::threads {

namespace detail {

using agreement::signature_of;
using shardwise::detail::arrive;
using shardwise::detail::mark_aborted;
using shardwise::detail::wait_until;

struct group;

// One threads::run: the abort flag, every rank's error and every group, so an abort can wake them all.
struct context {
  explicit context(int ranks)
      : spins(shardwise::detail::spins_for(ranks)), errors(static_cast<std::size_t>(ranks)) {}
  const int spins;
  std::atomic<bool> aborted{false};
  std::mutex mutex;
  int failed_rank = -1;       // the rank that failed first (under mutex)
  std::string failed_reason;  // its error, as its peers quote it; empty until known
  std::vector<std::exception_ptr> errors;  // by world rank
  std::vector<std::weak_ptr<group>> groups;

  void abort() noexcept;
  // Rank `world_rank` is failing: it is abandoning calls while its error unwinds, or (with the error)
  // its body has thrown. Its peers stop; the first rank to fail is the one they name.
  void failing(int world_rank, std::exception_ptr error = nullptr) noexcept {
    {
      std::lock_guard lock(mutex);
      if (failed_rank < 0) failed_rank = world_rank;
      if (error && failed_rank == world_rank && failed_reason.empty()) {
        try {
          failed_reason = reason_of(error);
        } catch (...) {  // no memory for the words: the peers name the rank alone
        }
      }
      if (error) errors[static_cast<std::size_t>(world_rank)] = std::move(error);
    }
    abort();
  }
};

[[noreturn]] inline void throw_peer_failure(context& run, int world_rank, std::string_view operation) {
  std::string detail;
  {
    std::lock_guard lock(run.mutex);
    detail = run.failed_rank < 0 ? std::string("stopped because the run was aborted")
                                 : "stopped because rank " + std::to_string(run.failed_rank) + " failed" +
                                       (run.failed_reason.empty() ? "" : ": " + run.failed_reason);
  }
  throw peer_error(world_rank, operation, detail);
}

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
  std::array<std::atomic<std::uint32_t>, 2> done{};  // ranks finished with phase 0 / phase 1
  std::atomic<std::uint32_t> working{0};             // ranks inside a read/write section right now
  std::atomic<std::uint32_t> released{0};

  void abort() noexcept {
    mark_aborted(posted);
    for (auto& phase : done) mark_aborted(phase);
  }
};

// Point to point. Sends and receives meet in the receiver's mailbox, matched by (source, tag,
// sequence number), so messages between a pair with one tag arrive in the order they were sent and
// receives match in the order they were posted. Whichever side comes second copies the data straight
// from the sender's buffer into the receiver's; only a blocking send that finds no receive waiting
// leaves a copy behind (so it returns at once, like MPI's eager sends).
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
};

// The ranks of one communicator (the world, or a split of it).
struct group {
  group(std::shared_ptr<context> run_context, std::vector<int> world_ranks_of_members)
      : run(std::move(run_context)), world_ranks(std::move(world_ranks_of_members)) {
    for (std::size_t r = 0; r < world_ranks.size(); ++r) mailboxes.push_back(std::make_unique<mailbox>());
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
    arrive(op->posted, ranks());
    return op;
  }

  void leave(std::uint64_t sequence, operation& op) {
    if (op.released.fetch_add(1, std::memory_order_acq_rel) + 1 == ranks()) {
      std::lock_guard lock(mutex);
      operations.erase(sequence);
    }
  }

  void abort() noexcept {
    std::lock_guard lock(mutex);
    for (auto& [sequence, op] : operations) op->abort();
    for (auto& box : mailboxes) {
      std::lock_guard box_lock(box->mutex);
      for (auto& sent : box->messages)
        if (sent.delivered) mark_aborted(*sent.delivered);
      for (auto& wanted : box->receives) mark_aborted(wanted->done);
    }
  }

  std::shared_ptr<context> run;
  std::vector<int> world_ranks;
  std::mutex mutex;
  std::unordered_map<std::uint64_t, std::shared_ptr<operation>> operations;
  std::vector<std::unique_ptr<mailbox>> mailboxes;
};

inline void context::abort() noexcept {
  std::vector<std::shared_ptr<group>> alive;
  {
    std::lock_guard lock(mutex);
    aborted.store(true);
    for (auto& weak : groups)
      if (auto strong = weak.lock()) alive.push_back(std::move(strong));
  }
  for (auto& g : alive) g->abort();
}

inline std::shared_ptr<group> make_group(const std::shared_ptr<context>& run, std::vector<int> world_ranks) {
  auto created = std::make_shared<group>(run, std::move(world_ranks));
  std::lock_guard lock(run->mutex);
  run->groups.push_back(created);
  return created;
}

// ---- the data movement of each collective (what rank `rank` does in phase `phase`)

template <class Call>
const Call& peer(const operation& op, int s) {
  return *static_cast<const Call*>(op.slots[static_cast<std::size_t>(s)].call);
}

// Boundary of chunk r when n elements are split over P ranks; multiples of 16 elements keep chunks
// apart by whole cache lines and vector widths.
inline std::size_t chunk_start(std::size_t n, int ranks, int r) {
  if (r >= ranks) return n;
  return std::min(n, (n * static_cast<std::size_t>(r) / static_cast<std::size_t>(ranks)) & ~std::size_t{15});
}

// Whether a rank that writes this many bytes in one call should bypass the cache (see
// streaming_store.hpp); decided once per call so every block of it is stored the same way.
template <class T>
bool streams(std::size_t elements_written) {
  return elements_written * sizeof(T) >= shardwise::detail::streaming_threshold_bytes;
}

template <class T>
void copy_elements(T* to, const T* from, std::size_t count, bool streaming) {
  if (count != 0 && to != from)
    shardwise::detail::store_bytes(reinterpret_cast<std::byte*>(to), reinterpret_cast<const std::byte*>(from),
                                   count * sizeof(T), streaming);
}

// For i in [begin, end): reduces source(0)[i], …, source(P-1)[i] in rank order and writes the result to
// destination(0)[i], …, destination(D-1)[i]. A tile is read completely before it is written, so a
// destination may alias a source.
template <op Reduction, class T, class Source, class Destination>
void reduce_range(std::size_t begin, std::size_t end, int ranks, const Source& source, int destinations,
                  const Destination& destination, bool streaming) {
  using A = accumulator_t<T>;
  constexpr std::size_t tile = 1024;
  A accumulated[tile];
  T result[tile];
  for (std::size_t base = begin; base < end; base += tile) {
    const std::size_t count = std::min(tile, end - base);
    const T* first = source(0) + base;
    for (std::size_t i = 0; i < count; ++i) accumulated[i] = static_cast<A>(first[i]);
    for (int s = 1; s < ranks; ++s) {
      const T* next = source(s) + base;
      for (std::size_t i = 0; i < count; ++i)
        accumulated[i] = combine<Reduction>(accumulated[i], static_cast<A>(next[i]));
    }
    for (std::size_t i = 0; i < count; ++i) result[i] = static_cast<T>(accumulated[i]);
    for (int d = 0; d < destinations; ++d) copy_elements(destination(d) + base, result, count, streaming);
  }
  if (streaming) shardwise::detail::finish_streaming();
}

template <class T, class Source, class Destination>
void reduce_range(op reduction, std::size_t begin, std::size_t end, int ranks, const Source& source,
                  int destinations, const Destination& destination) {
  const bool streaming = streams<T>((end - begin) * static_cast<std::size_t>(destinations));
  dispatch(reduction, [&](auto compiled) {
    reduce_range<decltype(compiled)::value, T>(begin, end, ranks, source, destinations, destination, streaming);
  });
}

// Rounds of work each collective needs; a barrier needs none beyond everyone having arrived.
template <class Call>
inline constexpr int phases = 1;
template <>
inline constexpr int phases<calls::barrier> = 0;

// Rank r reduces chunk r of every input and writes it straight into every rank's output: inputs are
// read once and outputs written once, in a single round. Only rank r touches chunk r of any buffer,
// so in place is safe.
template <class T>
void perform(calls::all_reduce<T>& mine, const operation& op, int rank, int ranks, int) {
  const std::size_t n = mine.in.size();
  reduce_range<T>(
      mine.reduction, chunk_start(n, ranks, rank), chunk_start(n, ranks, rank + 1), ranks,
      [&](int s) { return peer<calls::all_reduce<T>>(op, s).in.data(); }, ranks,
      [&](int d) { return peer<calls::all_reduce<T>>(op, d).out.data(); });
}

template <class T>
void perform(calls::reduce<T>& mine, const operation& op, int rank, int ranks, int) {
  const std::size_t n = mine.in.size();
  T* out = peer<calls::reduce<T>>(op, mine.root).out.data();
  reduce_range<T>(
      mine.reduction, chunk_start(n, ranks, rank), chunk_start(n, ranks, rank + 1), ranks,
      [&](int s) { return peer<calls::reduce<T>>(op, s).in.data(); }, 1, [&](int) { return out; });
}

template <class T>
void perform(calls::reduce_scatter<T>& mine, const operation& op, int rank, int ranks, int) {
  const std::size_t block = mine.out.size();
  const std::size_t offset = block * static_cast<std::size_t>(rank);
  reduce_range<T>(
      mine.reduction, 0, block, ranks, [&](int s) { return peer<calls::reduce_scatter<T>>(op, s).in.data() + offset; },
      1, [&](int) { return mine.out.data(); });
}

template <class T>
void perform(calls::all_gather<T>& mine, const operation& op, int rank, int ranks, int) {
  const std::size_t block = mine.in.size();
  const bool streaming = streams<T>(mine.out.size());
  for (int k = 0; k < ranks; ++k) {
    const int s = (rank + k) % ranks;
    copy_elements(mine.out.data() + block * static_cast<std::size_t>(s), peer<calls::all_gather<T>>(op, s).in.data(),
                  block, streaming);
  }
  if (streaming) shardwise::detail::finish_streaming();
}

template <class T>
void perform(calls::all_to_all<T>& mine, const operation& op, int rank, int ranks, int) {
  const std::size_t block = mine.out.size() / static_cast<std::size_t>(ranks);
  const bool streaming = streams<T>(mine.out.size());
  for (int k = 0; k < ranks; ++k) {
    const int s = (rank + k) % ranks;
    copy_elements(mine.out.data() + block * static_cast<std::size_t>(s),
                  peer<calls::all_to_all<T>>(op, s).in.data() + block * static_cast<std::size_t>(rank), block, streaming);
  }
  if (streaming) shardwise::detail::finish_streaming();
}

template <class T>
void perform(calls::all_to_all_v<T>& mine, const operation& op, int rank, int ranks, int) {
  std::size_t received = 0;
  const bool streaming = streams<T>(mine.out.size());
  for (int s = 0; s < ranks; ++s) {
    const auto& from = peer<calls::all_to_all_v<T>>(op, s);
    std::size_t offset = 0;
    for (int r = 0; r < rank; ++r) offset += static_cast<std::size_t>(from.send_counts[static_cast<std::size_t>(r)]);
    const auto count = static_cast<std::size_t>(mine.receive_counts[static_cast<std::size_t>(s)]);
    copy_elements(mine.out.data() + received, from.in.data() + offset, count, streaming);
    received += count;
  }
  if (streaming) shardwise::detail::finish_streaming();
}

template <class T>
void perform(calls::broadcast<T>& mine, const operation& op, int rank, int, int) {
  if (rank == mine.root) return;
  const bool streaming = streams<T>(mine.data.size());
  copy_elements(mine.data.data(), peer<calls::broadcast<T>>(op, mine.root).data.data(), mine.data.size(), streaming);
  if (streaming) shardwise::detail::finish_streaming();
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
template <>
inline constexpr int phases<split_call> = 2;
inline agreement::signature signature_of(const split_call&, int world_rank) {
  return agreement::signature_of(calls::split{}, world_rank);
}

// ---- what every rank must agree on (comm/agreement.hpp), checked once all have posted

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

// An in-place all-to-all overwrites blocks its peers still have to read: it reads from a copy.
template <class Call>
struct in_place_staging {
  void stage(Call&) {}
};
template <class T>
struct in_place_staging<calls::all_to_all<T>> {
  std::vector<T> copy;
  void stage(calls::all_to_all<T>& call) {
    if (call.in.data() != call.out.data() || call.in.empty()) return;
    copy.assign(call.in.begin(), call.in.end());
    call.in = copy;
  }
};

// ---- requests

class pending {
 public:
  pending() = default;
  pending(const pending&) = delete;
  pending& operator=(const pending&) = delete;
  virtual ~pending() = default;
  // Advances this rank's part; true once complete. Throws (and releases everything) on failure.
  virtual bool progress(bool block) = 0;
  // Called when the request dies during stack unwinding: abort the run, detach safely.
  virtual void abandon() noexcept = 0;
};

// One rank's part in one collective. Not movable: peers read the descriptor through its address.
template <class Call>
class collective final : public pending {
 public:
  collective(const Call& call, std::shared_ptr<group> members, int rank, std::uint64_t sequence)
      : call_(call), group_(std::move(members)), rank_(rank), sequence_(sequence) {
    staging_.stage(call_);
    op_ = group_->join(sequence_, rank_, slot{&call_, signature_of(call_, world_rank())}, Call::name);
  }
  ~collective() override {
    if (!released_) abandon();
  }

  bool progress(bool block) override {
    const std::uint32_t ranks = group_->ranks();
    if (stage_ == 0) {
      if (!advance(op_->posted, ranks, block)) return false;
      if (auto problem = disagreement(call_, *op_, *group_, rank_)) {
        // Every rank finds a disagreement (each compares all), so all meet here once more: nobody may
        // leave while another still reads its descriptor.
        arrive(op_->done[0], ranks);
        wait_until(op_->done[0], ranks);
        drain_and_release();
        throw argument_error(world_rank(), Call::name, *problem);
      }
      stage_ = 1;
    }
    if constexpr (phases<Call> > 0) {
      for (; stage_ <= phases<Call>; ++stage_) {
        auto& finished = op_->done[static_cast<std::size_t>(stage_ - 1)];
        if (!worked_) {
          work(stage_ - 1);
          worked_ = true;
          arrive(finished, ranks);
        }
        if (!advance(finished, ranks, block)) return false;
        worked_ = false;
      }
    }
    release();
    return true;
  }

  void abandon() noexcept override {
    if (released_) return;
    group_->run->failing(world_rank());
    drain_and_release();
  }

  Call& call() noexcept { return call_; }

 private:
  [[nodiscard]] int world_rank() const { return group_->world_ranks[static_cast<std::size_t>(rank_)]; }

  // false: not yet. Throws peer_error once peers can no longer touch this rank's buffers.
  bool advance(const std::atomic<std::uint32_t>& counter, std::uint32_t ranks, bool block) {
    if (wait_until(counter, ranks, block, group_->run->spins)) return true;
    if ((counter.load() & shardwise::detail::aborted_bit) == 0) return false;
    drain_and_release();
    throw_peer_failure(*group_->run, world_rank(), Call::name);
  }

  // Enter a read/write section only while the run is alive; an aborting peer waits for `working` to
  // drop to zero before it lets its buffers go (the increment is ordered before the flag check).
  void work(int phase) {
    op_->working.fetch_add(1);
    if (group_->run->aborted.load()) {
      op_->working.fetch_sub(1);
      drain_and_release();
      throw_peer_failure(*group_->run, world_rank(), Call::name);
    }
    perform(call_, *op_, rank_, group_->size(), phase);
    op_->working.fetch_sub(1);
  }

  void drain_and_release() noexcept {
    while (op_->working.load() != 0) std::this_thread::yield();
    release();
  }

  void release() noexcept {
    if (released_) return;
    released_ = true;
    group_->leave(sequence_, *op_);
  }

  Call call_;
  std::shared_ptr<group> group_;
  int rank_;
  std::uint64_t sequence_;
  std::shared_ptr<operation> op_;
  int stage_ = 0;
  bool worked_ = false;
  bool released_ = false;
  in_place_staging<Call> staging_;
};

}  // namespace detail

// A started operation (see shardwise::request). Destroying one that is still active waits for it,
// except while an exception unwinds the stack: then the run is aborted instead of hanging.
class request {
 public:
  request() = default;
  explicit request(std::unique_ptr<detail::pending> state) : state_(std::move(state)) {}
  request(request&&) noexcept = default;
  request& operator=(request&& other) noexcept {
    finish_quietly();
    state_ = std::move(other.state_);
    return *this;
  }
  ~request() { finish_quietly(); }

  void wait() {
    if (!state_) return;
    auto state = std::move(state_);
    state->progress(true);
  }
  bool test() {
    if (!state_) return true;
    try {
      if (!state_->progress(false)) return false;
    } catch (...) {
      state_.reset();
      throw;
    }
    state_.reset();
    return true;
  }

 private:
  void finish_quietly() noexcept {
    if (!state_) return;
    if (std::uncaught_exceptions() > 0) {
      state_->abandon();
    } else {
      try {
        state_->progress(true);
      } catch (...) {  // the error already reached every rank's own calls; a destructor cannot throw
      }
    }
    state_.reset();
  }
  std::unique_ptr<detail::pending> state_;
};

namespace detail {

// Takes an entry back out of a mailbox list if nobody has matched it yet; true if it was still there.
template <class Entry, class Same>
bool withdraw_from(mailbox& box, std::list<Entry>& entries, const Same& same) {
  std::lock_guard lock(box.mutex);
  for (auto it = entries.begin(); it != entries.end(); ++it)
    if (same(*it)) {
      entries.erase(it);
      return true;
    }
  return false;
}

// Waits for a flag raised by the other side of a transfer. If the run aborts first, the entry is
// withdrawn, or, when the other side already holds it, its copy (which never blocks) is let finish.
class transfer_wait final : public pending {
 public:
  transfer_wait(std::shared_ptr<group> members, int mailbox_owner, std::shared_ptr<std::atomic<std::uint32_t>> flag,
                std::shared_ptr<posted_receive> receive, int world_rank, std::string_view name)
      : group_(std::move(members)), mailbox_owner_(mailbox_owner), flag_(std::move(flag)), receive_(std::move(receive)),
        world_rank_(world_rank), name_(name) {}
  ~transfer_wait() override { abandon(); }

  bool progress(bool block) override {
    if (done_) return true;
    if (!wait_until(*flag_, 1, block, group_->run->spins)) {
      if ((flag_->load() & shardwise::detail::aborted_bit) == 0) return false;
      withdraw();
      throw_peer_failure(*group_->run, world_rank_, name_);
    }
    done_ = true;
    if (receive_ && receive_->sent_bytes != receive_->bytes)
      throw argument_error(world_rank_, name_,
                           "rank " + std::to_string(receive_->source) + " sent " + std::to_string(receive_->sent_bytes) +
                               " bytes with tag " + std::to_string(receive_->tag) + ", the receive buffer holds " +
                               std::to_string(receive_->bytes) + " bytes");
    return true;
  }
  void abandon() noexcept override {
    if (done_) return;
    group_->run->failing(world_rank_);
    withdraw();
  }

 private:
  void withdraw() noexcept {
    done_ = true;
    auto& box = *group_->mailboxes[static_cast<std::size_t>(mailbox_owner_)];
    const bool withdrawn =
        receive_ ? withdraw_from(box, box.receives, [&](const auto& wanted) { return wanted == receive_; })
                 : withdraw_from(box, box.messages, [&](const message& sent) { return sent.delivered == flag_; });
    if (withdrawn) return;
    while ((flag_->load() & ~shardwise::detail::aborted_bit) == 0) std::this_thread::yield();
  }

  std::shared_ptr<group> group_;
  int mailbox_owner_;
  std::shared_ptr<std::atomic<std::uint32_t>> flag_;
  std::shared_ptr<posted_receive> receive_;  // set for receives: the flag is its `done`
  int world_rank_;
  std::string_view name_;
  bool done_ = false;
};

}  // namespace detail

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

  // Backend hooks (communicator_interface calls these after checking arguments).
  template <class Call>
  void run(const Call& call) {
    detail::collective<Call> mine(call, group_, rank_, next_collective_++);
    mine.progress(true);
  }
  template <class Call>
  [[nodiscard]] request start(const Call& call) {
    return request(std::make_unique<detail::collective<Call>>(call, group_, rank_, next_collective_++));
  }

  // A blocking send returns at once: it copies straight into a waiting receive, or leaves a copy.
  template <class T>
  void run(const calls::send<T>& call) {
    auto outgoing = message_for(call);
    deliver_or_post(call.destination, outgoing, /*keep_copy=*/true);
  }
  // isend copies nothing: the receiver reads this rank's buffer, so keep it alive until wait().
  template <class T>
  [[nodiscard]] request start(const calls::send<T>& call) {
    auto outgoing = message_for(call);
    outgoing.delivered = std::make_shared<std::atomic<std::uint32_t>>(0);
    auto delivered = outgoing.delivered;
    deliver_or_post(call.destination, outgoing, /*keep_copy=*/false);
    return request(std::make_unique<detail::transfer_wait>(group_, call.destination, std::move(delivered), nullptr,
                                                           world_rank(), "isend"));
  }
  template <class T>
  void run(const calls::recv<T>& call) {
    start(call).wait();
  }
  template <class T>
  [[nodiscard]] request start(const calls::recv<T>& call) {
    if (group_->run->aborted.load()) detail::throw_peer_failure(*group_->run, world_rank(), "recv");
    auto wanted = std::make_shared<detail::posted_receive>();
    wanted->source = call.source;
    wanted->tag = call.tag;
    wanted->sequence = received_[{call.source, call.tag}]++;
    wanted->data = reinterpret_cast<std::byte*>(call.data.data());
    wanted->bytes = call.data.size_bytes();
    auto& box = *group_->mailboxes[static_cast<std::size_t>(rank_)];
    std::optional<detail::message> arrived;
    {
      std::lock_guard lock(box.mutex);
      const auto it = std::find_if(box.messages.begin(), box.messages.end(),
                                   [&](const detail::message& sent) { return detail::matches(sent, *wanted); });
      if (it != box.messages.end()) {
        arrived = std::move(*it);
        box.messages.erase(it);
      } else {
        box.receives.push_back(wanted);
      }
    }
    if (arrived) detail::transfer(*arrived, *wanted);
    auto flag = std::shared_ptr<std::atomic<std::uint32_t>>(wanted, &wanted->done);
    return request(std::make_unique<detail::transfer_wait>(group_, rank_, std::move(flag), std::move(wanted),
                                                           world_rank(), "recv"));
  }

  // Ranks passing the same colour form a communicator, ordered by key and then by rank. Collective.
  [[nodiscard]] communicator split(int color, int key) {
    if (color < 0)
      throw argument_error(world_rank(), "split", "colour " + std::to_string(color) + " is negative");
    detail::collective<detail::split_call> mine(detail::split_call{.color = color, .key = key, .parent = group_, .members = {}, .created = {}},
                                                group_, rank_, next_collective_++);
    mine.progress(true);
    const auto& members = mine.call().members;
    const auto position = std::find(members.begin(), members.end(), rank_) - members.begin();
    return communicator(mine.call().created, static_cast<int>(position));
  }

 private:
  template <class T>
  detail::message message_for(const calls::send<T>& call) {
    if (group_->run->aborted.load()) detail::throw_peer_failure(*group_->run, world_rank(), "send");
    detail::message outgoing;
    outgoing.source = rank_;
    outgoing.tag = call.tag;
    outgoing.sequence = sent_[{call.destination, call.tag}]++;
    outgoing.data = reinterpret_cast<const std::byte*>(call.data.data());
    outgoing.bytes = call.data.size_bytes();
    return outgoing;
  }
  // Copies into a matching posted receive if there is one (true); otherwise leaves the message in the
  // destination's mailbox, with a copy of the data when the caller will not keep its buffer.
  bool deliver_or_post(int destination, detail::message& outgoing, bool keep_copy) {
    auto& box = *group_->mailboxes[static_cast<std::size_t>(destination)];
    std::shared_ptr<detail::posted_receive> wanted;
    {
      std::lock_guard lock(box.mutex);
      const auto it = std::find_if(box.receives.begin(), box.receives.end(),
                                   [&](const auto& receive) { return detail::matches(outgoing, *receive); });
      if (it == box.receives.end()) {
        if (keep_copy) {
          outgoing.copy.assign(outgoing.data, outgoing.data + outgoing.bytes);
          outgoing.data = outgoing.copy.data();
        }
        box.messages.push_back(std::move(outgoing));
        return false;
      }
      wanted = *it;
      box.receives.erase(it);
    }
    detail::transfer(outgoing, *wanted);
    return true;
  }

  std::shared_ptr<detail::group> group_;
  int rank_;
  std::uint64_t next_collective_ = 0;
  std::map<std::pair<int, int>, std::uint64_t> sent_;
  std::map<std::pair<int, int>, std::uint64_t> received_;
};

static_assert(shardwise::communicator<communicator>, "threads::communicator must model shardwise::communicator");

// comm/shared_memory.hpp: threads share one address space, so every rank's block is on the heap and
// the ranks exchange its address.
[[nodiscard]] inline std::vector<int> shared_memory_groups(const communicator& comm) {
  return std::vector<int>(static_cast<std::size_t>(comm.size()), 0);
}
[[nodiscard]] inline std::optional<shared_memory> share_memory(communicator& comm, std::size_t bytes) {
  constexpr std::align_val_t cache_line{64};  // no false sharing with the neighbouring allocation
  const auto release = [](std::byte* block) { ::operator delete(block, cache_line); };
  std::unique_ptr<std::byte, decltype(release)> mine(static_cast<std::byte*>(::operator new(bytes, cache_line)), release);
  const std::int64_t here[2] = {static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(mine.get())),
                                static_cast<std::int64_t>(bytes)};
  std::vector<std::int64_t> all(2 * static_cast<std::size_t>(comm.size()));
  comm.all_gather(std::span<const std::int64_t>(here, 2), all);
  std::vector<std::span<std::byte>> blocks;
  for (std::size_t p = 0; p < all.size(); p += 2)
    blocks.emplace_back(reinterpret_cast<std::byte*>(static_cast<std::uintptr_t>(all[p])), static_cast<std::size_t>(all[p + 1]));
  // Freeing is collective, as MPI_Win_free is: a rank may still be raising a flag in a peer's block after
  // the peer saw it raised, so no block goes before every rank is done with all of them. The barrier is
  // on a communicator of the memory's own, split now while every rank is here. A rank unwinding an
  // error does not wait for peers that may never come, and after a failure the barrier throws: either
  // way the block is left allocated rather than freed under a peer.
  auto group = std::make_shared<communicator>(comm.split(0, comm.rank()));
  return shared_memory(std::move(blocks), comm.rank(), [block = mine.release(), release, group] {
    if (std::uncaught_exceptions() > 0) return;
    try {
      group->barrier();
    } catch (...) {
      return;
    }
    release(block);
  });
}

namespace detail {

inline bool is_peer_error(const std::exception_ptr& failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const peer_error&) {
    return true;
  } catch (...) {
    return false;
  }
}

// The error run() reports: the one that made the others stop, not a peer_error it caused. Only
// ranks that fail on their own raise anything else; if several did, the lowest of them, so the same
// run reports the same error every time.
inline std::pair<int, std::exception_ptr> originating_error(const std::vector<std::exception_ptr>& errors) {
  for (const bool peers_too : {false, true})
    for (std::size_t r = 0; r < errors.size(); ++r)
      if (errors[r] && (peers_too || !is_peer_error(errors[r]))) return {static_cast<int>(r), errors[r]};
  return {-1, nullptr};
}

}  // namespace detail

// Runs body(communicator&) on `ranks` threads (rank 0 on the calling thread) and returns when all have
// finished. An exception on any rank aborts the others' calls (each throws peer_error, "stopped because
// rank R failed: …"); run() rethrows the error of the rank that failed on its own (see
// detail::originating_error): a shardwise::error as it is (it names its rank and the user's calls),
// anything else nested in a rank_failure.
template <class Body>
void run(int ranks, Body&& body) {
  if (ranks < 1) throw argument_error(-1, "threads::run", "needs at least one rank, got " + std::to_string(ranks));
  auto run_context = std::make_shared<detail::context>(ranks);
  std::vector<int> world_ranks(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) world_ranks[static_cast<std::size_t>(r)] = r;
  const auto world = detail::make_group(run_context, std::move(world_ranks));

  auto rank_main = [&](int rank) {
    try {
      communicator comm(world, rank);
      body(comm);
    } catch (...) {
      run_context->failing(rank, std::current_exception());
    }
  };
  {
    std::vector<std::jthread> others;
    others.reserve(static_cast<std::size_t>(ranks - 1));
    for (int r = 1; r < ranks; ++r) others.emplace_back(rank_main, r);
    rank_main(0);
  }

  const auto [failed, failure] = detail::originating_error(run_context->errors);
  if (!failure) return;
  try {
    std::rethrow_exception(failure);
  } catch (const shardwise::error&) {
    throw;
  } catch (const std::exception& original) {
    std::throw_with_nested(rank_failure(failed, "threads::run", std::string("the rank body threw: ") + original.what()));
  } catch (...) {
    std::throw_with_nested(rank_failure(failed, "threads::run", "the rank body threw a non-standard exception"));
  }
}

}  // namespace shardwise::threads
