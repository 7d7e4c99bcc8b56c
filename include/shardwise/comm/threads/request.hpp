#pragma once
// A started operation of the threads backend (see shardwise::request): a collective this rank has
// posted, or a send or receive. wait() and test() do this rank's part and report completion.
#include <exception>
#include <memory>
#include <utility>

namespace shardwise::threads {

namespace detail {

// One rank's part in a started operation.
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
  // Called when the request, dropped unwaited, finished with `error`, which a destructor cannot throw.
  virtual void failed_unwaited(std::exception_ptr error) noexcept = 0;
};

}  // namespace detail

// Destroying a request that is still active waits for it, except while an exception unwinds the stack:
// then the run is aborted instead of hanging. An error that wait would have thrown (a deadlock, a
// disagreement) is kept for run() to report, so a dropped request cannot make a run end as if it had
// succeeded.
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
  request(const request&) = delete;
  request& operator=(const request&) = delete;
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
      } catch (...) {
        state_->failed_unwaited(std::current_exception());
      }
    }
    state_.reset();
  }
  std::unique_ptr<detail::pending> state_;
};

}  // namespace shardwise::threads
