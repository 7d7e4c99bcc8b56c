// The trial's verdict from its pairs of calls (comm/path_trial.hpp): the first pair left out, it ends
// once the calls have taken its time and the other pairs favour one path by two or more, or once each
// path has had its most calls; it keeps the path of the pairs' median ratio. Its calls run the first
// path first in every other pair. On virtual time one call of each path decides.
#include <gtest/gtest.h>

#include <cstddef>
#include <span>
#include <vector>

#include "shardwise/comm/path_trial.hpp"

namespace {

using shardwise::path_trial;

// Each pair's first path's time and second path's, as the trial keeps them.
std::vector<double> in_pairs(const std::vector<double>& first, const std::vector<double>& second) {
  std::vector<double> seconds;
  for (std::size_t c = 0; c < first.size(); ++c) {
    seconds.push_back(first[c]);
    seconds.push_back(second[c]);
  }
  return seconds;
}

TEST(path_trial, ends_when_the_time_is_spent_and_the_pairs_after_the_first_favour_one_path) {
  // 0.2 s against 0.3 s a call; the first pair, whose calls also touch their buffers first, the other
  // way round.
  const auto first_faster = path_trial::judge(in_pairs({0.9, 0.21, 0.2}, {0.5, 0.3, 0.31}));
  EXPECT_TRUE(first_faster.done);
  EXPECT_TRUE(first_faster.first_faster);
  const auto second_faster = path_trial::judge(in_pairs({0.5, 0.3, 0.31}, {0.9, 0.21, 0.2}));
  EXPECT_TRUE(second_faster.done);
  EXPECT_FALSE(second_faster.first_faster);
}

TEST(path_trial, goes_on_while_the_calls_have_taken_less_than_its_time) {
  // 1 ms against 2 ms: every pair agrees, but 9 ms spent of 50.
  EXPECT_FALSE(path_trial::judge(in_pairs({0.001, 0.001, 0.001}, {0.002, 0.002, 0.002})).done);
  // At the most calls it ends all the same.
  const auto v = path_trial::judge(
      in_pairs(std::vector<double>(path_trial::most_calls, 0.001), std::vector<double>(path_trial::most_calls, 0.002)));
  EXPECT_TRUE(v.done);
  EXPECT_TRUE(v.first_faster);
}

TEST(path_trial, goes_on_while_the_pairs_do_not_favour_one_path_by_two) {
  // Calls of about 450 ms on a busy machine: after the first pair, one pair each way.
  EXPECT_FALSE(path_trial::judge(in_pairs({0.48, 0.44, 0.37}, {0.47, 0.43, 0.45})).done);
  // Two more pairs for the first path put it two ahead.
  EXPECT_FALSE(path_trial::judge(in_pairs({0.48, 0.44, 0.37, 0.36}, {0.47, 0.43, 0.45, 0.46})).done);
  const auto v = path_trial::judge(in_pairs({0.48, 0.44, 0.37, 0.36, 0.35}, {0.47, 0.43, 0.45, 0.46, 0.44}));
  EXPECT_TRUE(v.done);
  EXPECT_TRUE(v.first_faster);
  // Paths that never come apart end at the most calls, the first kept on a tie.
  const auto tie = path_trial::judge(
      in_pairs(std::vector<double>(path_trial::most_calls, 0.4), std::vector<double>(path_trial::most_calls, 0.4)));
  EXPECT_TRUE(tie.done);
  EXPECT_TRUE(tie.first_faster);
  EXPECT_FALSE(path_trial::judge(in_pairs(std::vector<double>(path_trial::most_calls - 1, 0.4),
                                          std::vector<double>(path_trial::most_calls - 1, 0.4)))
                   .done);
}

TEST(path_trial, keeps_the_path_most_pairs_favour_not_the_fastest_call) {
  // The first path 10% faster in three pairs of four after the first; the second path's one lucky call
  // is the fastest of all.
  const auto v = path_trial::judge(in_pairs({0.04, 0.010, 0.0095, 0.009, 0.0085}, {0.06, 0.011, 0.0105, 0.010, 0.008}));
  EXPECT_TRUE(v.done);
  EXPECT_TRUE(v.first_faster);
}

TEST(path_trial, keeps_the_path_of_the_median_ratio_whatever_the_order_of_the_pairs) {
  // After the first pair, first path over second 1.2, 1.3, 0.5, 1.1, 0.6: the median is 1.1 (the
  // middle pair's is 0.5).
  const std::vector<double> first{1.0, 1.2, 1.3, 0.5, 1.1, 0.6};
  EXPECT_FALSE(path_trial::judge(in_pairs(first, std::vector<double>(first.size(), 1.0))).first_faster);
  const std::vector<double> mirrored{1.0, 0.8, 0.7, 1.5, 0.9, 1.4};
  EXPECT_TRUE(path_trial::judge(in_pairs(mirrored, std::vector<double>(mirrored.size(), 1.0))).first_faster);
}

TEST(path_trial, counts_no_pairs_past_its_most_calls) {
  // The trial's pairs after the first: the median ratio 0.99, the first path faster. A single pair more
  // at 1.5 would put the median at 1.245; twice the trial's pairs more follow.
  static_assert(path_trial::most_calls == 8);
  std::vector<double> first{0.5, 0.9, 0.9, 0.9, 0.99, 1.5, 1.5, 1.5};
  first.resize(3 * std::size_t{path_trial::most_calls}, 1.5);
  const auto v = path_trial::judge(in_pairs(first, std::vector<double>(first.size(), 1.0)));
  EXPECT_TRUE(v.done);
  EXPECT_TRUE(v.first_faster);
}

// A communicator of one rank on the wall clock.
struct one_rank {
  void barrier() {}
  template <class Op>
  void all_reduce(std::span<double>, Op) {}
};

TEST(path_trial, runs_the_first_path_first_in_every_other_pair) {
  path_trial trial;
  std::vector<bool> paths;
  one_rank comm;
  // Calls of next to no time never spend the trial's time, so it runs to its most calls.
  while (!trial.done()) {
    ASSERT_LT(paths.size(), 2 * std::size_t{path_trial::most_calls});
    const bool result = trial.call(comm, [&](bool first) {
      paths.push_back(first);
      return first;
    });
    EXPECT_EQ(result, paths.back()) << "the call returns its path's result";
  }
  std::vector<bool> expected;
  for (int pair = 0; pair < path_trial::most_calls; ++pair)
    for (const bool first : {pair % 2 == 0, pair % 2 != 0}) expected.push_back(first);
  EXPECT_EQ(paths, expected);
}

// A communicator of one rank whose virtual time the paths move on by their own durations.
struct virtual_clock {
  double time = 0;
  double synchronized_now() const { return time; }
  template <class Op>
  void all_reduce(std::span<double>, Op) {}
};
static_assert(shardwise::keeps_virtual_time<virtual_clock>);

TEST(path_trial, on_virtual_time_decides_after_one_call_of_each_path) {
  for (const double second_path : {2.0, 4.0}) {
    virtual_clock clock;
    path_trial trial;
    std::vector<bool> paths;
    const auto call = [&] {
      return trial.call(clock, [&](bool first) {
        clock.time += first ? 3.0 : second_path;
        paths.push_back(first);
        return first;
      });
    };
    EXPECT_TRUE(call());
    EXPECT_FALSE(trial.done());
    EXPECT_FALSE(call());
    ASSERT_TRUE(trial.done());
    EXPECT_EQ(trial.chose_first(), second_path > 3.0);
    EXPECT_EQ(paths, (std::vector<bool>{true, false}));
  }
}

}  // namespace
