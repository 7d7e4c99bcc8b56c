#pragma once
// Errors that only a run can detect. Every message starts with "[rank N] " and then says where it
// failed in the user's terms: the public calls it happened inside, outermost first, then the step
// that failed and why:
//
//   [rank 3] redistribute(row_1d → cube_3d::input, 1000×999): all_to_all_v: …
//
// Public entry points add their call as an error leaves them (rethrow_within_call below), so the
// call is written once, at the entry point, and never by the code that throws.
#include <cstddef>
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace shardwise {

class error : public std::runtime_error {
 public:
  error(int rank, std::string_view operation, std::string_view detail)
      : std::runtime_error(std::string(detail)), rank_(rank), operation_(operation), detail_(detail) {
    compose();
  }

  [[nodiscard]] const char* what() const noexcept override { return text_.c_str(); }

  // The rank (in the world of the run) that raised the error; -1 when raised outside any rank.
  [[nodiscard]] int rank() const noexcept { return rank_; }
  // The step that failed ("all_gather", "matmul"), whatever calls it happened inside.
  [[nodiscard]] const std::string& operation() const noexcept { return operation_; }
  // The message without its "[rank N] " prefix: what another rank quotes when it stops because of
  // this one ("stopped because rank 2 failed: …").
  [[nodiscard]] std::string_view reason() const noexcept { return std::string_view(text_).substr(prefix_length_); }
  // Why the step failed, without the calls it happened inside: what a summary of many runs quotes
  // after the step's name (a planner's line for a mesh it drops).
  [[nodiscard]] const std::string& detail() const noexcept { return detail_; }

  // Names the rank an error raised without one (by a layout's mapping, say) happened on.
  void on_rank(int world_rank) {
    if (rank_ >= 0) return;
    rank_ = world_rank;
    compose();
  }

  // Records that the error happened inside the user's `call` ("redistribute(row_1d<> → block_2d<>,
  // 8x8)") on world rank `world_rank` (see on_rank). The call goes in front of those already
  // recorded: the outermost call comes first.
  void add_call(int world_rank, std::string_view call) {
    if (calls_.empty()) innermost_ = call.substr(0, call.find_first_of("<("));
    calls_.insert(0, std::string(call) + ": ");
    rank_ = rank_ >= 0 ? rank_ : world_rank;
    compose();
  }

 private:
  // "[rank N] calls…: operation: detail", the operation left out when the innermost call is itself
  // ("[rank 0] gather(row_1d<> 4x4, root 9): root 9 is not …").
  void compose() {
    text_ = rank_ >= 0 ? "[rank " + std::to_string(rank_) + "] " : std::string("[no rank] ");
    prefix_length_ = text_.size();
    text_.append(calls_);
    if (innermost_ != operation_) text_.append(operation_).append(": ");
    text_.append(detail_);
  }

  int rank_;
  std::string operation_;
  std::string detail_;
  std::string calls_;      // "outer(…): inner(…): ", outermost first
  std::string innermost_;  // the innermost call's name
  std::string text_;
  std::size_t prefix_length_ = 0;
};

// "name(a, b)": how an entry point writes its call for rethrow_within_call.
template <class... Arguments>
[[nodiscard]] std::string call_text(std::string_view name, const Arguments&... arguments) {
  std::string text(name);
  text += "(";
  std::string_view separator;
  ((text.append(separator).append(arguments), separator = ", "), ...);
  return text + ")";
}

// Call only inside a catch handler: rethrows the exception being handled, unchanged in type, after
// recording in it (if it is a shardwise::error) that it happened inside `call` on `world_rank`. The
// handler of a public entry point, as a function-try-block:
//
//   auto redistribute(const dtensor<…>& tensor) try {
//     …
//   } catch (...) {
//     rethrow_within_call(rank, "redistribute(" + … + ")");
//   }
[[noreturn]] inline void rethrow_within_call(int world_rank, std::string_view call) {
  try {
    throw;
  } catch (error& raised) {
    raised.add_call(world_rank, call);
    throw;
  }
}

// The reason to quote when an exception is reported inside another message: a shardwise::error
// without its "[rank N] " prefix (the outer message has its own), anything else as it says.
[[nodiscard]] inline std::string reason_of(const std::exception_ptr& failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const error& raised) {
    return std::string(raised.reason());
  } catch (const std::exception& raised) {
    return raised.what();
  } catch (...) {
    return "a non-standard exception";
  }
}

// A call's own arguments are wrong: sizes, counts, roots, peers, colours; or the ranks of a group
// called one collective with different arguments, or different collectives.
class argument_error : public error {
  using error::error;
};

// A process grid that does not fit its communicator or a coordinate outside it.
class mesh_error : public error {
  using error::error;
};

// A layout mapping that breaks the layout contract: an element held by no rank or twice, a block
// outside the matrix, owner() disagreeing with the blocks (layout/check_layout.hpp).
class layout_error : public error {
  using error::error;
};

// Another rank failed, so this rank's call cannot complete: "stopped because rank R failed: …".
class peer_error : public error {
  using error::error;
};

// Every rank of a threads::run waits in a call or has returned from its body, so none can go on: a
// call that some ranks of its group never make, or calls made in different orders. Each waiting rank
// throws it, naming its call: "deadlock: rank 0 waits in all_gather, and ranks 1, 2 and 3 have returned
// from their bodies; no rank can go on". (MPI processes cannot tell; they hang.)
class deadlock_error : public error {
  using error::error;
};

// A rank's body threw something that is not a shardwise::error; run() rethrows it as this, naming the
// rank, with the original nested (std::rethrow_if_nested reaches it).
class rank_failure : public error {
  using error::error;
};

// The MPI library returned an error code; the message carries MPI's own error string.
class mpi_error : public error {
 public:
  mpi_error(int rank, std::string_view operation, int code, std::string_view mpi_text)
      : error(rank, operation, std::string("MPI error ") + std::to_string(code) + ": " + std::string(mpi_text)),
        code_(code) {}
  [[nodiscard]] int code() const noexcept { return code_; }

 private:
  int code_;
};

}  // namespace shardwise
