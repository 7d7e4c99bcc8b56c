#pragma once
// Which MPI sizes each backend test body runs on, for CTest. A body declares its rank counts where it
// runs (TypeParam::run(body, {2, 3, 8}); tests/support/backends.hpp). Under MPI the size is mpiexec's,
// so the MPI test executable, run once on one rank with --shardwise_list_rank_counts=<file>, runs no
// body: each test writes its name and its rank counts into <file> instead ("collectives/0.barrier 2 3 8"),
// and CTest launches the executable at each size with only the tests that run on it
// (cmake/shardwise_mpi_cases.cmake). Launched at a size it does not declare, a test fails.
#include <gtest/gtest.h>

#include <fstream>
#include <initializer_list>
#include <set>
#include <string>

namespace shardwise::testing {

struct rank_count_listing {
  std::string file;  // empty: run the bodies
  std::set<std::string> listed;

  static rank_count_listing& instance() {
    static rank_count_listing listing;
    return listing;
  }
  [[nodiscard]] bool active() const { return !file.empty(); }
};

// "collectives/0.barrier_waits_for_every_rank": the running test's name, as --gtest_filter takes it.
inline std::string current_test_name() {
  const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
  return std::string(test->test_suite_name()) + "." + test->name();
}

inline std::string rank_counts_text(std::initializer_list<int> rank_counts, const char* separator) {
  std::string text;
  for (const int ranks : rank_counts) text += (text.empty() ? "" : separator) + std::to_string(ranks);
  return text;
}

// Ends a test body once its rank counts are listed.
struct rank_counts_listed {};

// Writes "<test> <counts…>" (or, with no counts, "<test>": it declares none) to the listing file.
inline void list_rank_counts(const std::string& test, std::initializer_list<int> rank_counts) {
  auto& listing = rank_count_listing::instance();
  listing.listed.insert(test);
  std::ofstream(listing.file, std::ios::app)
      << test << (rank_counts.size() == 0 ? "" : " ") << rank_counts_text(rank_counts, " ") << '\n';
}

}  // namespace shardwise::testing
