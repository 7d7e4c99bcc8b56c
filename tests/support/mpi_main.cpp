// main() of the MPI test executables (`<name>_mpi`, run under mpiexec). MPI lives for the whole run.
// Rank 0 prints GoogleTest's usual report; every other rank prints only its failed assertions, each
// prefixed "[rank N]", so the log is not repeated P times and a failure on one rank is not lost. A
// rank with a failure exits non-zero, and so does mpiexec.
// With --shardwise_list_rank_counts=<file> it runs no test body and lists the rank counts of its
// backend tests into <file> instead (tests/support/rank_counts.hpp).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "shardwise/comm/mpi.hpp"
#include "support/rank_counts.hpp"

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

// The backend tests: those of typed suites (tests/support/backends.hpp). Other tests in the executable
// need no ranks and run in the threads build only.
std::vector<std::string> backend_tests() {
  std::vector<std::string> names;
  const auto& unit = *::testing::UnitTest::GetInstance();
  for (int i = 0; i < unit.total_test_suite_count(); ++i) {
    const auto& suite = *unit.GetTestSuite(i);
    for (int j = 0; j < suite.total_test_count(); ++j) {
      const auto& test = *suite.GetTestInfo(j);
      if (test.type_param() != nullptr) names.push_back(std::string(suite.name()) + "." + test.name());
    }
  }
  return names;
}

int list_rank_counts(const std::string& file) {
  auto& listing = shardwise::testing::rank_count_listing::instance();
  listing.file = file;
  std::ofstream(file, std::ios::trunc);
  const auto tests = backend_tests();
  std::string filter;
  for (const auto& name : tests) filter += (filter.empty() ? "" : ":") + name;
  GTEST_FLAG_SET(filter, filter.empty() ? std::string("-*") : filter);
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  delete listeners.Release(listeners.default_result_printer());  // the listed tests "fail": say nothing
  [[maybe_unused]] const int failed = RUN_ALL_TESTS();           // every listed test ends in an exception
  for (const auto& name : tests)
    if (!listing.listed.contains(name)) shardwise::testing::list_rank_counts(name, {});
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  shardwise::mpi::environment mpi(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  constexpr std::string_view listing_flag = "--shardwise_list_rank_counts=";
  for (int i = 1; i < argc; ++i)
    if (std::string_view(argv[i]).starts_with(listing_flag))
      return list_rank_counts(std::string(argv[i] + listing_flag.size()));
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);  // MPI_COMM_WORLD aborts on error: nothing to check
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new failures_only(rank));  // GoogleTest owns and deletes it
  }
  // Ranks that disagree on their calls would wait until CTest's timeout ends the test, saying nothing;
  // CTest sets SHARDWISE_MPI_TIMEOUT for every MPI test, so the waiting call names itself and ends the job.
  const auto watchdog = shardwise::detail::watchdog_from_environment(rank);
  return RUN_ALL_TESTS();
}
