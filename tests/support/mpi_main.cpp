// main() of the MPI test executables (`<name>_mpi`, run under mpiexec). MPI lives for the whole run.
// Rank 0 prints GoogleTest's usual report; every other rank prints only its failed assertions, each
// prefixed "[rank N]", so the log is not repeated P times and a failure on one rank is not lost. A
// rank with a failure exits non-zero, and so does mpiexec.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <string>

#include "shardwise/comm/mpi.hpp"

namespace {

class failures_only : public ::testing::EmptyTestEventListener {
 public:
  explicit failures_only(int rank) : rank_(rank) {}

  // The test's name is kept here: UnitTest::current_test_info() would deadlock inside OnTestPartResult.
  void OnTestStart(const ::testing::TestInfo& test) override {
    test_ = std::string(test.test_suite_name()) + "." + test.name();
  }
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::printf("[rank %d] %s: %s:%d: Failure\n%s\n", rank_, test_.c_str(),
                result.file_name() != nullptr ? result.file_name() : "?", result.line_number(), result.message());
    std::fflush(stdout);
  }

 private:
  int rank_;
  std::string test_;
};

}  // namespace

int main(int argc, char** argv) {
  shardwise::mpi::environment mpi(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);  // MPI_COMM_WORLD aborts on error: nothing to check
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new failures_only(rank));  // GoogleTest owns and deletes it
  }
  return RUN_ALL_TESTS();
}
