#pragma once
// The MPI backend: one rank per MPI process (`mpiexec -n P ./program`), a thin layer over MPI.
//
// Each collective maps to the one MPI call that does it: blocking calls to blocking MPI (Open MPI's
// blocking collectives are faster than its non-blocking ones), started calls to the MPI_I… twin. One
// exception: a blocking reduce-scatter of large blocks runs a ring of MPI_Sendrecv (ring_reduce_scatter). Data
// that is only moved travels as MPI_BYTE, so any trivially copyable type works through one code path;
// reductions use MPI's own datatypes, and bf16 is widened to float, reduced in float and rounded back
// once, as the threads backend does. Communicators use MPI_ERRORS_RETURN and every return code is
// checked, so an MPI failure is a shardwise::mpi_error carrying MPI's own text, not an abort.
//
// With SHARDWISE_CHECK_AGREEMENT on (by default in debug builds; comm/agreement.hpp), every
// collective first all-gathers each rank's signature (operation, element type, count, root,
// reduction) on a duplicate of its communicator, and all ranks throw argument_error naming both
// calls if they differ, before any data moves. A started collective posts that exchange and starts
// once it has agreed, when the request (or a later request of the same communicator) is tested or
// waited on, or the communicator makes another collective call; started collectives still start in
// the order they were started.
//
// Included on its own (not by shardwise.hpp): programs that never use MPI never need it.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "shardwise/comm/agreement.hpp"
#include "shardwise/comm/algorithms/ring.hpp"
#include "shardwise/comm/communicator.hpp"
#include "shardwise/comm/detail/backend_hooks.hpp"
#include "shardwise/comm/detail/call_watchdog.hpp"
#include "shardwise/comm/shared_memory.hpp"
#include "shardwise/core/bf16.hpp"
#include "shardwise/core/element_memory.hpp"
#include "shardwise/core/error.hpp"

namespace shardwise::mpi {

namespace detail {

// The one place an MPI return code is looked at.
inline void check(int code, int world_rank, std::string_view operation) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) {
    throw mpi_error(world_rank, operation, code, "(MPI_Error_string could not describe this code)");
  }
  throw mpi_error(world_rank, operation, code, std::string_view(text, static_cast<std::size_t>(length)));
}

// MPI datatypes of the types MPI reduces itself (bf16 is reduced as float).
template <class T>
MPI_Datatype datatype() {
  if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>)
    return MPI_DOUBLE;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return MPI_INT32_T;
  else {
    static_assert(std::is_same_v<T, std::int64_t>, "shardwise::mpi: no MPI datatype for this element type");
    return MPI_INT64_T;
  }
}

inline MPI_Op operation_of(op reduction) {
  switch (reduction) {
    case op::sum: return MPI_SUM;
    case op::prod: return MPI_PROD;
    case op::min: return MPI_MIN;
    case op::max: break;
  }
  return MPI_MAX;
}

// MPI counts are ints: refuse a buffer whose count would not fit rather than pass a wrapped one.
// unit_bytes > 1 when elements travel as bytes.
inline int count_of(std::size_t elements, std::size_t unit_bytes, int world_rank, std::string_view operation) {
  if (elements > static_cast<std::size_t>(INT_MAX) / unit_bytes) {
    throw argument_error(world_rank, operation,
                         std::to_string(elements) + " elements" +
                             (unit_bytes > 1 ? " of " + std::to_string(unit_bytes) + " bytes, sent as bytes," : "") +
                             " exceed MPI's count limit of " + std::to_string(INT_MAX));
  }
  return static_cast<int>(elements * unit_bytes);
}

// Calls an MPI operation's blocking form, or its non-blocking twin (the same arguments and a request)
// when `pending` is given, so each collective is written once for both forms.
// Args come from the blocking form alone (type_identity_t keeps the others out of deduction).
template <class... Args>
int blocking_or_started(MPI_Request* pending, int (*blocking)(Args...),
                        std::type_identity_t<int (*)(Args..., MPI_Request*)> started,
                        std::type_identity_t<Args>... args) {
  return pending != nullptr ? started(args..., pending) : blocking(args...);
}

// What is left to do once MPI has finished (round bf16 back, move an in-place block into place); it
// also owns the temporaries MPI reads and writes until then. Empty when there is nothing to do.
using completion = std::function<void()>;

// The float twin of a bf16 reduction: it reduces `staged` (the widened input) in place.
inline calls::all_reduce<float> in_float(const calls::all_reduce<bf16>& call, std::span<float> staged, int) {
  return {staged, staged, call.reduction};
}
inline calls::reduce<float> in_float(const calls::reduce<bf16>& call, std::span<float> staged, int rank) {
  return {staged, rank == call.root ? staged : std::span<float>{}, call.reduction, call.root};
}
inline calls::reduce_scatter<float> in_float(const calls::reduce_scatter<bf16>& call, std::span<float> staged,
                                             int rank) {
  return {staged, staged.subspan(static_cast<std::size_t>(rank) * call.out.size(), call.out.size()), call.reduction};
}

// A receive must get exactly the message size it asked for (MPI itself accepts shorter messages): the
// same rule, and the same words, as the threads backend.
inline void check_received(const MPI_Status& status, int expected_bytes, int tag, int world_rank) {
  int received = 0;
  check(MPI_Get_count(&status, MPI_BYTE, &received), world_rank, "recv");
  if (received != expected_bytes)
    throw argument_error(world_rank, "recv",
                         "rank " + std::to_string(status.MPI_SOURCE) + " sent " + std::to_string(received) +
                             " bytes with tag " + std::to_string(tag) + ", the receive buffer holds " +
                             std::to_string(expected_bytes) + " bytes");
}

// Every rank's call to one collective, exchanged on `comm` (the agreement communicator) before the
// collective moves data: the signatures in one all-gather; for all_to_all_v, once they agree, every
// rank's counts in a second. Blocking calls run both at once; started calls post each and advance
// when tested or waited on.
class agreement_exchange {
 public:
  template <class Call>
  agreement_exchange(const Call& call, int rank, int size, int world_rank)
      : name_(Call::name),
        rank_(rank),
        size_(size),
        world_rank_(world_rank),
        mine_(agreement::signature_of(call, world_rank)),
        all_(static_cast<std::size_t>(size)) {
    if constexpr (requires { call.send_counts; }) {
      counts_.assign(call.send_counts.begin(), call.send_counts.end());
      counts_.insert(counts_.end(), call.receive_counts.begin(), call.receive_counts.end());
    }
  }
  agreement_exchange(const agreement_exchange&) = delete;  // MPI holds the addresses of its buffers
  agreement_exchange& operator=(const agreement_exchange&) = delete;
  ~agreement_exchange() {
    if (pending_ != MPI_REQUEST_NULL) MPI_Wait(&pending_, MPI_STATUS_IGNORE);  // a destructor cannot report
  }

  // Posts the exchange of the signatures, always as a started all-gather: a blocking exchange would
  // never match a started one, and a blocking call among started ones would hang unnamed.
  void begin(MPI_Comm comm, bool started) {
    mine_.started = started ? 1 : 0;
    constexpr int bytes = sizeof(agreement::signature);
    post(comm, &mine_, bytes, all_.data(), bytes);
  }

  // After begin(): true once every rank is known to have made the same call (with `block` it returns
  // true or throws): argument_error naming both calls if not, mpi_error if MPI fails.
  bool advance(MPI_Comm comm, bool block) {
    for (;;) {
      if (pending_ != MPI_REQUEST_NULL) {
        int done = 1;
        const int code = block ? MPI_Wait(&pending_, MPI_STATUS_IGNORE) : MPI_Test(&pending_, &done, MPI_STATUS_IGNORE);
        if (code != MPI_SUCCESS) pending_ = MPI_REQUEST_NULL;
        check(code, world_rank_, name_);
        if (done == 0) return false;
      }
      if (round_ == 2) break;
      if (auto problem = agreement::disagreement(
              rank_, size_, [&](int s) -> const agreement::signature& { return all_[static_cast<std::size_t>(s)]; }))
        throw argument_error(world_rank_, name_, *problem);
      if (counts_.empty()) return true;
      all_counts_.resize(counts_.size() * static_cast<std::size_t>(size_));
      const int bytes = static_cast<int>(counts_.size() * sizeof(int));
      post(comm, counts_.data(), bytes, all_counts_.data(), bytes);
    }
    // all_counts_: rank s's send counts, then its receive counts, for every s.
    const auto ranks = static_cast<std::size_t>(size_);
    const auto count = [&](int s, std::size_t entry) {
      return all_counts_[static_cast<std::size_t>(s) * 2 * ranks + entry];
    };
    if (auto problem = agreement::count_disagreement(
            size_, [&](int s, int r) { return count(s, static_cast<std::size_t>(r)); },
            [&](int r, int s) { return count(r, ranks + static_cast<std::size_t>(s)); },
            [&](int s) { return static_cast<int>(all_[static_cast<std::size_t>(s)].world_rank); }))
      throw argument_error(world_rank_, name_, *problem);
    return true;
  }

 private:
  void post(MPI_Comm comm, const void* mine, int bytes, void* all, int each) {
    ++round_;
    check(MPI_Iallgather(mine, bytes, MPI_BYTE, all, each, MPI_BYTE, comm, &pending_), world_rank_, name_);
  }

  std::string_view name_;
  int rank_;
  int size_;
  int world_rank_;
  agreement::signature mine_;
  std::vector<agreement::signature> all_;
  std::vector<int> counts_;  // all_to_all_v: send counts, then receive counts
  std::vector<int> all_counts_;
  MPI_Request pending_ = MPI_REQUEST_NULL;
  int round_ = 0;  // rounds posted
};

}  // namespace detail

class communicator;

namespace detail {

// A started collective under the agreement check, waiting for its exchange to agree.
struct deferred_start {
  template <class Call>
  deferred_start(const Call& call, int rank, int size, int world_rank) : exchange(call, rank, size, world_rank) {}
  agreement_exchange exchange;
  std::function<completion(communicator&, MPI_Request*)> launch;  // starts the collective itself
  MPI_Request handle = MPI_REQUEST_NULL;                          // the collective, once started
  completion complete;
  std::exception_ptr failure;  // why it never started
  bool settled = false;        // started, or failed
};

// A communicator's deferred starts, oldest first, shared with their requests. `owner` follows the
// communicator when it moves; it is null once the communicator is gone (it settles them all first).
struct deferred_starts {
  communicator* owner = nullptr;
  std::deque<std::shared_ptr<deferred_start>> waiting;
};

// Prints `text` (a line), then takes every rank down so none waits forever for this one.
[[noreturn]] inline void abort_job(const std::string& text) noexcept {
  std::fprintf(stderr, "%s\n", text.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();  // MPI_Abort does not return; this keeps [[noreturn]] true if it ever did
}

// Prints why this rank failed, then aborts the job (abort_job). Call only from a catch handler.
[[noreturn]] inline void abort_world() noexcept {
  auto prefix = [] {
    int rank = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);  // best effort: this rank is going down either way
    return "[rank " + std::to_string(rank) + "] ";
  };
  std::string text;
  try {
    throw;
  } catch (const shardwise::error& failure) {
    text = failure.rank() >= 0 ? failure.what() : prefix() + std::string(failure.reason());  // "[rank N] …" once
  } catch (const std::exception& failure) {
    text = prefix() + failure.what();
  } catch (...) {
    text = prefix() + "the rank body threw a non-standard exception";
  }
  abort_job(text);
}

// Operations this process left unfinished while an error unwound its stack (request::finish). MPI may
// still read or write their buffers, so what they own stays here until the process ends, and the
// process makes no further call: the next one, or the end of mpi::run, aborts the job.
struct abandoned_operations {
  std::vector<completion> kept;
  std::string first;  // the first one's name, for the abort's message
};
inline abandoned_operations& abandoned() {
  static abandoned_operations operations;
  return operations;
}

// Aborts the job if this process left an operation unfinished; `call` is what it was about to do.
inline void refuse_after_abandoned(int world_rank, std::string_view call) noexcept {
  if (abandoned().first.empty()) return;
  abort_job("[rank " + std::to_string(world_rank) + "] " + std::string(call) +
            ": this rank went on after an error left its " + abandoned().first +
            " unfinished (MPI cannot cancel it and may still use its buffers); aborting the job");
}

// How long a rank unwinding an error waits for a send or a collective it started to finish before it
// leaves it: long enough for a peer already in the matching call, far shorter than a job's timeout
// for a peer that waits for this rank in another call and never will be.
inline constexpr auto unwinding_wait = std::chrono::seconds(2);

}  // namespace detail

// A started operation. wait() and test() complete it (and run its completion step once); a request
// whose wait failed is finished. Destroying an active request waits for it, since MPI may still be
// using its buffers, except while an exception unwinds the stack: a receive is then cancelled, and a
// send or collective is waited for detail::unwinding_wait and then left to MPI with what the request
// owns (an error there is swallowed: the exception already in flight is the one to report).
class request {
 public:
  request() = default;
  request(request&& other) noexcept
      : handle_(std::exchange(other.handle_, MPI_REQUEST_NULL)),
        deferred_(std::move(other.deferred_)),
        starts_(std::move(other.starts_)),
        complete_(std::exchange(other.complete_, {})),
        status_(other.status_),
        expected_bytes_(std::exchange(other.expected_bytes_, -1)),
        tag_(other.tag_),
        world_rank_(other.world_rank_),
        operation_(other.operation_) {}
  request& operator=(request&& other) noexcept {
    if (this != &other) {
      finish();
      handle_ = std::exchange(other.handle_, MPI_REQUEST_NULL);
      deferred_ = std::move(other.deferred_);
      starts_ = std::move(other.starts_);
      complete_ = std::exchange(other.complete_, {});
      status_ = other.status_;
      expected_bytes_ = std::exchange(other.expected_bytes_, -1);
      tag_ = other.tag_;
      world_rank_ = other.world_rank_;
      operation_ = other.operation_;
    }
    return *this;
  }
  request(const request&) = delete;
  request& operator=(const request&) = delete;
  ~request() { finish(); }

  void wait() {
    const shardwise::detail::inside_call timed(operation_);
    if (deferred_) take_started(true);
    if (handle_ != MPI_REQUEST_NULL) settle(MPI_Wait(&handle_, &status_));
    run_completion();
  }
  bool test() {
    if (deferred_ && !take_started(false)) return false;
    if (handle_ != MPI_REQUEST_NULL) {
      int done = 0;
      settle(MPI_Test(&handle_, &done, &status_));
      if (done == 0) return false;
    }
    run_completion();
    return true;
  }

 private:
  friend class communicator;
  request(int world_rank, std::string_view operation) : world_rank_(world_rank), operation_(operation) {}

  // A deferred start: once its exchange has agreed and it has started, its handle and completion become
  // this request's (false: not yet). Throws what kept it from starting.
  bool take_started(bool block);

  void settle(int code) {
    if (code == MPI_SUCCESS) return;
    handle_ = MPI_REQUEST_NULL;
    complete_ = {};
    expected_bytes_ = -1;
    detail::check(code, world_rank_, operation_);
  }
  void run_completion() {
    if (complete_) std::exchange(complete_, {})();
    if (expected_bytes_ >= 0) detail::check_received(status_, std::exchange(expected_bytes_, -1), tag_, world_rank_);
  }
  void finish() noexcept {
    if (handle_ == MPI_REQUEST_NULL && !deferred_ && !complete_ && expected_bytes_ < 0) return;
    if (std::uncaught_exceptions() > 0) {
      // A receive is cancelled: its sender may be waiting for this failing rank and never send, and
      // waiting for it would keep the error from mpi::run, which aborts the job.
      if (handle_ != MPI_REQUEST_NULL && expected_bytes_ >= 0 && MPI_Cancel(&handle_) == MPI_SUCCESS) {
        MPI_Wait(&handle_, MPI_STATUS_IGNORE);
        complete_ = {};
        expected_bytes_ = -1;
        return;
      }
      // A send or a collective cannot be cancelled (Open MPI cancels no send), and its peer may be
      // waiting for this rank elsewhere: waited for a while, then left.
      if (handle_ != MPI_REQUEST_NULL && !deferred_ && !finished_within(detail::unwinding_wait)) {
        auto& left = detail::abandoned();
        if (left.first.empty()) left.first = std::string(operation_);
        left.kept.push_back(std::exchange(complete_, {}));
        handle_ = MPI_REQUEST_NULL;
        expected_bytes_ = -1;
        return;
      }
      try {
        wait();
      } catch (...) {  // the exception already in flight is the one to report
      }
    } else {
      wait();
    }
  }

  // Tests the operation until it finishes or `limit` has passed, sleeping between tests so that the
  // peers it waits for get the cores. False: still running.
  bool finished_within(std::chrono::steady_clock::duration limit) noexcept {
    const auto until = std::chrono::steady_clock::now() + limit;
    for (;;) {
      int done = 0;
      if (MPI_Test(&handle_, &done, &status_) != MPI_SUCCESS || done != 0) return true;
      if (std::chrono::steady_clock::now() >= until) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  MPI_Request handle_ = MPI_REQUEST_NULL;
  std::shared_ptr<detail::deferred_start> deferred_;  // under the agreement check, until it starts
  std::shared_ptr<detail::deferred_starts> starts_;   // its communicator's
  detail::completion complete_;
  MPI_Status status_{};
  int expected_bytes_ = -1;  // a receive's size, checked against status_ once complete
  int tag_ = 0;
  int world_rank_ = -1;
  std::string_view operation_;
};

// A group of MPI processes (an owned MPI communicator). Move-only; freed on destruction.
class communicator : public communicator_interface<communicator> {
 public:
  using request = mpi::request;

  // A duplicate of MPI_COMM_WORLD, so switching errors to MPI_ERRORS_RETURN and our traffic leave the
  // user's world untouched. Collective over MPI_COMM_WORLD; MPI must be initialised (see environment).
  [[nodiscard]] static communicator world() {
    int initialized = 0;
    detail::check(MPI_Initialized(&initialized), -1, "mpi::communicator::world");
    if (initialized == 0) {
      throw error(-1, "mpi::communicator::world",
                  "MPI is not initialised: use shardwise::mpi::run or a shardwise::mpi::environment");
    }
    int world_rank = -1;  // the rank every error names
    detail::check(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank), -1, "mpi::communicator::world");
    MPI_Comm duplicate = MPI_COMM_NULL;
    detail::check(MPI_Comm_dup(MPI_COMM_WORLD, &duplicate), world_rank, "mpi::communicator::world");
    return communicator(duplicate, world_rank, "mpi::communicator::world");
  }

  communicator(communicator&& other) noexcept
      : communicator_interface<communicator>(other),  // the traffic counted so far moves along
        comm_(std::exchange(other.comm_, MPI_COMM_NULL)),
        ring_(std::exchange(other.ring_, MPI_COMM_NULL)),
        agreement_(std::exchange(other.agreement_, MPI_COMM_NULL)),
        ring_scratch_(std::move(other.ring_scratch_)),
        starts_(std::move(other.starts_)),
        rank_(other.rank_),
        size_(other.size_),
        world_rank_(other.world_rank_) {
    if (starts_) starts_->owner = this;
  }
  communicator& operator=(communicator&& other) noexcept {
    if (this != &other) {
      release();
      communicator_interface<communicator>::operator=(other);
      comm_ = std::exchange(other.comm_, MPI_COMM_NULL);
      ring_ = std::exchange(other.ring_, MPI_COMM_NULL);
      agreement_ = std::exchange(other.agreement_, MPI_COMM_NULL);
      ring_scratch_ = std::move(other.ring_scratch_);
      starts_ = std::move(other.starts_);
      if (starts_) starts_->owner = this;
      rank_ = other.rank_;
      size_ = other.size_;
      world_rank_ = other.world_rank_;
    }
    return *this;
  }
  communicator(const communicator&) = delete;
  communicator& operator=(const communicator&) = delete;
  ~communicator() { release(); }

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  [[nodiscard]] int world_rank() const noexcept { return world_rank_; }
  // The underlying MPI communicator, for calling MPI directly; it stays owned by this object. Every
  // started collective has started on it (see the agreement check above).
  [[nodiscard]] MPI_Comm native() const noexcept {
    if (starts_) starts_->owner->settle_started(nullptr, true);
    return comm_;
  }

  // Ranks passing the same colour form a communicator, ordered by key and then by rank. Collective.
  [[nodiscard]] communicator split(int color, int key) {
    if (color < 0) throw argument_error(world_rank_, "split", "colour " + std::to_string(color) + " is negative");
    const shardwise::detail::inside_call timed("split");
    agree(calls::split{});
    MPI_Comm part = MPI_COMM_NULL;
    detail::check(MPI_Comm_split(comm_, color, key, &part), world_rank_, "split");
    return communicator(part, world_rank_, "split");
  }

 private:
  friend class mpi::request;
  friend struct shardwise::detail::backend_hooks;

  template <class Call>
  void run(const Call& call) {
    detail::refuse_after_abandoned(world_rank_, Call::name);
    const shardwise::detail::inside_call timed(Call::name);
    if constexpr (agreement::collective_call<Call>) agree(call);
    if (auto complete = issue(call, nullptr)) complete();
  }
  template <class Call>
  [[nodiscard]] request start(const Call& call) {
    detail::refuse_after_abandoned(world_rank_, Call::name);
    request started(world_rank_, Call::name);
    if constexpr (agreement::checked_on_mpi && agreement::collective_call<Call>) {
      if (!starts_) {
        starts_ = std::make_shared<detail::deferred_starts>();
        starts_->owner = this;
      }
      auto deferred = std::make_shared<detail::deferred_start>(call, rank_, size_, world_rank_);
      deferred->exchange.begin(agreement_, true);
      deferred->launch = [call](communicator& owner, MPI_Request* pending) { return owner.issue(call, pending); };
      starts_->waiting.push_back(deferred);
      started.deferred_ = std::move(deferred);
      started.starts_ = starts_;
      return started;
    }
    started.complete_ = issue(call, &started.handle_);
    if constexpr (requires { call.source; }) {  // a receive: its size is checked on completion
      started.expected_bytes_ = static_cast<int>(call.data.size_bytes());
      started.tag_ = call.tag;
    }
    return started;
  }

  // Delegating first makes *this own `owned` before anything below can throw, so it is always freed.
  explicit communicator(MPI_Comm owned) noexcept : comm_(owned) {}
  communicator(MPI_Comm owned, int world_rank, std::string_view operation) : communicator(owned) {
    world_rank_ = world_rank;
    check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), operation);
    check(MPI_Comm_rank(comm_, &rank_), operation);
    check(MPI_Comm_size(comm_, &size_), operation);
    // Made here, where every rank is in a collective call anyway (never in a started one, which must
    // not wait for the others).
    if constexpr (agreement::checked_on_mpi) check(MPI_Comm_dup(comm_, &agreement_), operation);
  }

  void release() noexcept {
    if (comm_ == MPI_COMM_NULL) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    // After MPI_Finalize there is nothing left to free. A failing free cannot be reported from a
    // destructor; it only leaks a handle.
    if (finalized == 0) {
      if (starts_) settle_started(nullptr, true);
      MPI_Comm_free(&comm_);
      if (ring_ != MPI_COMM_NULL) MPI_Comm_free(&ring_);
      if (agreement_ != MPI_COMM_NULL) MPI_Comm_free(&agreement_);
    }
    if (starts_) starts_->owner = nullptr;
    comm_ = MPI_COMM_NULL;
    ring_ = MPI_COMM_NULL;
    agreement_ = MPI_COMM_NULL;
  }

  // Under the agreement check: every rank called the same collective (comm/agreement.hpp). The
  // collectives started before it start first, so that every rank starts them in one order.
  template <class Call>
  void agree(const Call& call) {
    if constexpr (agreement::checked_on_mpi) {
      if (starts_) settle_started(nullptr, true);
      detail::agreement_exchange exchange(call, rank_, size_, world_rank_);
      exchange.begin(agreement_, false);
      exchange.advance(agreement_, true);
    }
  }

  // Starts the deferred collectives whose exchanges have agreed, oldest first, up to and including
  // `last` (all when null); with block false, stops at the first still exchanging. True once `last`
  // has started or failed (its error is kept for its request).
  bool settle_started(const detail::deferred_start* last, bool block) noexcept {
    auto& waiting = starts_->waiting;
    while (!waiting.empty()) {
      detail::deferred_start& next = *waiting.front();
      try {
        if (!next.exchange.advance(agreement_, block)) return false;
        next.complete = next.launch(*this, &next.handle);
      } catch (...) {
        next.failure = std::current_exception();
      }
      next.settled = true;
      const bool reached = &next == last;
      waiting.pop_front();
      if (reached) return true;
    }
    return true;
  }

  void check(int code, std::string_view operation) const { detail::check(code, world_rank_, operation); }
  int elements(std::size_t n, std::string_view operation) const {
    return detail::count_of(n, 1, world_rank_, operation);
  }
  template <class T>
  int bytes(std::size_t n, std::string_view operation) const {
    return detail::count_of(n, sizeof(T), world_rank_, operation);
  }

  // bf16: reduce a widened float copy of the input in place, then round the result back once.
  template <class Call>
  detail::completion reduce_in_float(const Call& call, MPI_Request* pending) {
    std::vector<float> staged(call.in.begin(), call.in.end());
    const auto widened = detail::in_float(call, staged, rank_);
    auto reduced = issue(widened, pending);
    // Moving the vector into the completion keeps its data (which MPI holds a pointer to) in place.
    return [staged = std::move(staged), result = widened.out, out = call.out, reduced = std::move(reduced)] {
      if (reduced) reduced();
      std::ranges::copy(result, out.begin());
    };
  }

  // Each issue() starts its call (pending != nullptr) or runs it to the end, and returns what is left
  // to do after MPI completes.
  template <class T>
  detail::completion issue(const calls::all_reduce<T>& call, MPI_Request* pending) {
    if constexpr (std::is_same_v<T, bf16>) {
      return reduce_in_float(call, pending);
    } else {
      const void* in = call.in.data() == call.out.data() ? MPI_IN_PLACE : call.in.data();
      check(detail::blocking_or_started(pending, MPI_Allreduce, MPI_Iallreduce, in, call.out.data(),
                                        elements(call.out.size(), call.name), detail::datatype<T>(),
                                        detail::operation_of(call.reduction), comm_),
            call.name);
      return {};
    }
  }

  template <class T>
  detail::completion issue(const calls::reduce<T>& call, MPI_Request* pending) {
    if constexpr (std::is_same_v<T, bf16>) {
      return reduce_in_float(call, pending);
    } else {
      // MPI_IN_PLACE is the root's alone; other ranks always send their input.
      const bool in_place = rank_ == call.root && call.in.data() == call.out.data();
      check(detail::blocking_or_started(pending, MPI_Reduce, MPI_Ireduce, in_place ? MPI_IN_PLACE : call.in.data(),
                                        call.out.data(), elements(call.in.size(), call.name), detail::datatype<T>(),
                                        detail::operation_of(call.reduction), call.root, comm_),
            call.name);
      return {};
    }
  }

  template <class T>
  detail::completion issue(const calls::reduce_scatter<T>& call, MPI_Request* pending) {
    if constexpr (std::is_same_v<T, bf16>) {
      return reduce_in_float(call, pending);
    } else {
      const std::size_t block = call.out.size();
      if (pending == nullptr && size_ > 1 && block * sizeof(T) >= ring_reduce_scatter_bytes) {
        ring_reduce_scatter(call);
        return {};
      }
      const std::size_t offset = static_cast<std::size_t>(rank_) * block;
      const bool in_place = call.out.data() == call.in.data() + offset;
      // In place, MPI reads the whole buffer and leaves the result at its start, not at block rank().
      T* const whole = in_place ? call.out.data() - offset : nullptr;
      check(detail::blocking_or_started(pending, MPI_Reduce_scatter_block, MPI_Ireduce_scatter_block,
                                        in_place ? MPI_IN_PLACE : call.in.data(), in_place ? whole : call.out.data(),
                                        elements(block, call.name), detail::datatype<T>(),
                                        detail::operation_of(call.reduction), comm_),
            call.name);
      if (!in_place || offset == 0) return {};
      return [whole, block, out = call.out] { std::copy(whole, whole + block, out.data()); };
    }
  }

  // Open MPI 4.1's reduce-scatter (MPI_Reduce_scatter_block, and MPI_Reduce_scatter alike) is slower
  // than its own all-reduce: at 64 MiB it takes 240 ms on 8 ranks and 53–80 ms on 2 here, where a ring
  // of MPI_Sendrecv takes 72 and 14 ms. Every sharded update starts with a reduce-scatter, so blocking
  // calls with blocks of this size or more run the ring: P − 1 steps, in each of which a rank passes
  // the partial sum of one block to its right neighbour and adds its own contribution to the one that
  // arrives from its left, so block r completes on rank r (the bandwidth-optimal (P − 1)/P of the
  // input sent per rank). Started calls keep MPI's own, which progresses without the caller.
  static constexpr std::size_t ring_reduce_scatter_bytes = std::size_t{64} << 10;

  template <class T>
  void ring_reduce_scatter(const calls::reduce_scatter<T>& call) {
    const std::size_t block = call.out.size();
    const int count = elements(block, call.name);
    // Kept across calls: fresh blocks of tens of MiB cost more in page faults and zeroing than the
    // ring's copies (46 against 22 ms at 64 MiB on 2 ranks in bench/collectives). Holds twice the largest
    // block reduced so far.
    if (ring_scratch_.size() < 2 * block * sizeof(T)) ring_scratch_.resize(2 * block * sizeof(T));
    T* const partial = reinterpret_cast<T*>(ring_scratch_.data());
    T* const arrived = partial + block;
    // The steps of the ring (comm/algorithms/ring.hpp). After the first step, what a rank sends is the
    // partial sum it made in the step before, which is in the scratch, not in the input.
    const T* sending = nullptr;
    for (int step = 0; step < size_ - 1; ++step) {
      const auto e = algorithms::ring::reduce_scatter(size_, rank_, step, call.in.size());
      if (step == 0) sending = call.in.data() + e.sent.offset;
      check(MPI_Sendrecv(sending, count, detail::datatype<T>(), e.send_to, 0, arrived, count, detail::datatype<T>(),
                         e.receive_from, 0, ring_comm(call.name), MPI_STATUS_IGNORE),
            call.name);
      const T* const mine = call.in.data() + e.received.offset;
      // The last step's block is this rank's own: it goes to the output (in place, onto `mine` itself,
      // element by element, which is safe).
      T* const into = step == size_ - 2 ? call.out.data() : partial;
      dispatch(call.reduction, [&](auto reduction) {
        for (std::size_t i = 0; i < block; ++i) into[i] = combine<reduction.value>(arrived[i], mine[i]);
      });
      sending = partial;
    }
  }

  // The ring's messages travel on a duplicate of comm_, so they never match the user's receives.
  // Made at the first ring, which every rank of comm_ reaches together (a collective call).
  MPI_Comm ring_comm(std::string_view operation) {
    if (ring_ == MPI_COMM_NULL) check(MPI_Comm_dup(comm_, &ring_), operation);
    return ring_;
  }

  template <class T>
  detail::completion issue(const calls::all_gather<T>& call, MPI_Request* pending) {
    const bool in_place = call.in.data() == call.out.data() + static_cast<std::size_t>(rank_) * call.in.size();
    const int block = bytes<T>(call.in.size(), call.name);
    check(detail::blocking_or_started(pending, MPI_Allgather, MPI_Iallgather, in_place ? MPI_IN_PLACE : call.in.data(),
                                      block, MPI_BYTE, call.out.data(), block, MPI_BYTE, comm_),
          call.name);
    return {};
  }

  template <class T>
  detail::completion issue(const calls::all_to_all<T>& call, MPI_Request* pending) {
    const bool in_place = call.in.data() == call.out.data();
    const int block = bytes<T>(call.out.size() / static_cast<std::size_t>(size_), call.name);
    check(detail::blocking_or_started(pending, MPI_Alltoall, MPI_Ialltoall, in_place ? MPI_IN_PLACE : call.in.data(),
                                      block, MPI_BYTE, call.out.data(), block, MPI_BYTE, comm_),
          call.name);
    return {};
  }

  template <class T>
  detail::completion issue(const calls::all_to_all_v<T>& call, MPI_Request* pending) {
    // MPI takes a count and a displacement per rank, here in bytes: table = [send counts | send
    // displacements | receive counts | receive displacements]. Blocks are packed in rank order, so
    // displacements are prefix sums; once both totals fit an int, every count and displacement does.
    bytes<T>(call.in.size(), call.name);
    bytes<T>(call.out.size(), call.name);
    const auto ranks = static_cast<std::size_t>(size_);
    std::vector<int> table(4 * ranks);
    auto fill = [&](std::span<const int> counts, int* byte_counts) {
      int* const displacements = byte_counts + ranks;
      int offset = 0;
      for (std::size_t r = 0; r < ranks; ++r) {
        byte_counts[r] = counts[r] * static_cast<int>(sizeof(T));
        displacements[r] = offset;
        offset += byte_counts[r];
      }
    };
    int* const send = table.data();
    int* const receive = send + 2 * ranks;
    fill(call.send_counts, send);
    fill(call.receive_counts, receive);
    check(detail::blocking_or_started(pending, MPI_Alltoallv, MPI_Ialltoallv, call.in.data(), send, send + ranks,
                                      MPI_BYTE, call.out.data(), receive, receive + ranks, MPI_BYTE, comm_),
          call.name);
    if (pending == nullptr) return {};
    return [table = std::move(table)] {};  // MPI reads the table until the operation completes
  }

  template <class T>
  detail::completion issue(const calls::broadcast<T>& call, MPI_Request* pending) {
    check(detail::blocking_or_started(pending, MPI_Bcast, MPI_Ibcast, call.data.data(),
                                      bytes<T>(call.data.size(), call.name), MPI_BYTE, call.root, comm_),
          call.name);
    return {};
  }

  template <class T>
  detail::completion issue(const calls::send<T>& call, MPI_Request* pending) {
    check(
        detail::blocking_or_started(pending, MPI_Send, MPI_Isend, call.data.data(),
                                    bytes<T>(call.data.size(), call.name), MPI_BYTE, call.destination, call.tag, comm_),
        call.name);
    return {};
  }

  template <class T>
  detail::completion issue(const calls::recv<T>& call, MPI_Request* pending) {
    // MPI_Recv ends in a status where MPI_Irecv ends in a request, so this pair is spelt out.
    const int count = bytes<T>(call.data.size(), call.name);
    if (pending != nullptr) {
      check(MPI_Irecv(call.data.data(), count, MPI_BYTE, call.source, call.tag, comm_, pending), call.name);
      return {};
    }
    MPI_Status status{};
    check(MPI_Recv(call.data.data(), count, MPI_BYTE, call.source, call.tag, comm_, &status), call.name);
    detail::check_received(status, count, call.tag, world_rank_);
    return {};
  }

  detail::completion issue(const calls::barrier& call, MPI_Request* pending) {
    check(detail::blocking_or_started(pending, MPI_Barrier, MPI_Ibarrier, comm_), call.name);
    return {};
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm ring_ = MPI_COMM_NULL;                    // see ring_comm()
  MPI_Comm agreement_ = MPI_COMM_NULL;               // the agreement check's exchanges (see agree())
  std::vector<std::byte> ring_scratch_;              // see ring_reduce_scatter()
  std::shared_ptr<detail::deferred_starts> starts_;  // started collectives waiting for their exchange
  int rank_ = 0;
  int size_ = 0;
  int world_rank_ = -1;
};

static_assert(shardwise::communicator<communicator>, "mpi::communicator must model shardwise::communicator");

inline bool request::take_started(bool block) {
  if (!deferred_->settled && !starts_->owner->settle_started(deferred_.get(), block)) return false;
  const auto started = std::exchange(deferred_, nullptr);
  starts_.reset();
  if (started->failure) std::rethrow_exception(started->failure);
  handle_ = started->handle;
  complete_ = std::move(started->complete);
  return true;
}

// comm/shared_memory.hpp: ranks on one node map one MPI-3 shared-memory window (every rank a block of
// it). Stores into it are ordered by the C++ atomics of whoever uses it (comm/shared/epoch_flags.hpp),
// as between threads: the window is held in a passive-target epoch (MPI_Win_lock_all) for its
// lifetime, which direct loads and stores need.
namespace detail {
// The ranks of comm on this rank's node, as a communicator freed with this (collective).
struct node_ranks {
  MPI_Comm node = MPI_COMM_NULL;
  explicit node_ranks(communicator& comm) {
    check(MPI_Comm_split_type(comm.native(), MPI_COMM_TYPE_SHARED, comm.rank(), MPI_INFO_NULL, &node),
          comm.world_rank(), "MPI_Comm_split_type");
  }
  node_ranks(const node_ranks&) = delete;
  node_ranks& operator=(const node_ranks&) = delete;
  ~node_ranks() { MPI_Comm_free(&node); }
  [[nodiscard]] int size() const {
    int n = 0;
    MPI_Comm_size(node, &n);
    return n;
  }
};
}  // namespace detail

[[nodiscard]] inline std::vector<int> shared_memory_groups(communicator& comm) {
  int first = comm.rank();
  {
    const detail::node_ranks node(comm);
    detail::check(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, node.node), comm.world_rank(),
                  "shared_memory_groups");
  }
  std::vector<int> groups(static_cast<std::size_t>(comm.size()));
  comm.all_gather(std::span<const int>(&first, 1), groups);
  return groups;
}

[[nodiscard]] inline std::optional<shared_memory> share_memory(communicator& comm, std::size_t bytes) {
  const shardwise::detail::inside_call timed("share_memory");
  if (detail::node_ranks(comm).size() != comm.size()) return std::nullopt;  // the same answer on every rank
  const int rank = comm.world_rank();
  MPI_Info info = MPI_INFO_NULL;
  MPI_Info_create(&info);
  MPI_Info_set(info, "alloc_shared_noncontig", "true");  // each block on its own pages, near its rank
  void* base = nullptr;
  MPI_Win window = MPI_WIN_NULL;
  const int created = MPI_Win_allocate_shared(static_cast<MPI_Aint>(bytes), 1, info, comm.native(), &base, &window);
  MPI_Info_free(&info);
  detail::check(created, rank, "share_memory");
  detail::check(MPI_Win_lock_all(MPI_MODE_NOCHECK, window), rank, "share_memory");
  std::vector<std::span<std::byte>> blocks;
  for (int r = 0; r < comm.size(); ++r) {
    MPI_Aint size = 0;
    int unit = 0;
    void* block = nullptr;
    detail::check(MPI_Win_shared_query(window, r, &size, &unit, &block), rank, "share_memory");
    blocks.emplace_back(static_cast<std::byte*>(block), static_cast<std::size_t>(size));
  }
  // Freeing waits for every rank of the window. A rank unwinding an error leaves it to the job's abort
  // (mpi::run), which would otherwise never come while its peers wait in another call.
  return shared_memory(std::move(blocks), comm.rank(), comm.world_rank(), [window]() mutable {
    if (std::uncaught_exceptions() > 0) return;
    MPI_Win_unlock_all(window);
    MPI_Win_free(&window);
  });
}

// Initialises MPI (MPI_THREAD_FUNNELED: only the main thread calls MPI) unless something else already
// did, and finalises it on destruction if it initialised it. For programs that own main(), like tests.
class environment {
 public:
  environment() { initialize(nullptr, nullptr); }
  environment(int& argc, char**& argv) { initialize(&argc, &argv); }
  environment(const environment&) = delete;
  environment& operator=(const environment&) = delete;
  ~environment() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owner_ && finalized == 0) MPI_Finalize();  // a destructor cannot report a failing finalize
  }

 private:
  void initialize(int* argc, char*** argv) {
    int initialized = 0;
    detail::check(MPI_Initialized(&initialized), -1, "mpi::environment");
    if (initialized != 0) return;
    int provided = 0;
    detail::check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), -1, "mpi::environment");
    owner_ = true;
  }
  bool owner_ = false;
};

// Runs body(communicator&) on this process's rank of MPI_COMM_WORLD, initialising and finalising MPI
// around it when nobody else does, its element memory counted (core/element_memory.hpp). If body
// throws, the error is printed ("[rank N] …") and the whole job is aborted, so no rank hangs waiting
// for this one. With SHARDWISE_MPI_TIMEOUT=S in the environment, a blocking call that waits more than
// S seconds prints its rank and name and ends the job (comm/detail/call_watchdog.hpp).
template <class Body>
void run(int& argc, char**& argv, Body&& body) {
  environment session(argc, argv);
  try {
    const element_memory::scope counted(std::make_shared<element_memory>(true));  // what the rank holds
    auto world = communicator::world();
    const auto watchdog = shardwise::detail::watchdog_from_environment(world.world_rank());
    std::forward<Body>(body)(world);
    detail::refuse_after_abandoned(world.world_rank(), "mpi::run");  // finalising would wait for it
  } catch (...) {
    detail::abort_world();
  }
}

}  // namespace shardwise::mpi
