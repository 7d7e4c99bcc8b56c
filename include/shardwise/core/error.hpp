#pragma once
// Errors that only a run can detect. Every message starts with "[rank N] operation: " so a log line
// from one rank among many says where and in what it failed.
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace shardwise {

class error : public std::runtime_error {
 public:
  error(int rank, std::string_view operation, std::string_view detail)
      : std::runtime_error(format(rank, operation, detail)), rank_(rank), operation_(operation) {}

  // The rank (in the world of the run) that raised the error; -1 when raised outside any rank.
  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] const std::string& operation() const noexcept { return operation_; }

 private:
  static std::string format(int rank, std::string_view operation, std::string_view detail) {
    std::string text = rank >= 0 ? "[rank " + std::to_string(rank) + "] " : std::string("[no rank] ");
    text.append(operation).append(": ").append(detail);
    return text;
  }
  int rank_;
  std::string operation_;
};

// A call's own arguments are wrong: sizes, counts, roots, peers, colours.
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

// Another rank failed, so this rank's collective cannot complete.
class peer_error : public error {
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
