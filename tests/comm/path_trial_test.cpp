// The trial's verdict from its calls' times (comm/path_trial.hpp): it ends once the calls have taken
// its time and the paths' fastest calls lie further apart than each path's own two fastest, or once
// each path has had its most calls; it keeps the path of the faster fastest call. On virtual time one
// call of each path decides.
#include <gtest/gtest.h>

#include <cstddef>
#include <span>
#include <vector>

#include "shardwise/comm/path_trial.hpp"

namespace {

using shardwise::path_trial;

// The calls as the trial makes them: the first path's and the second's in turns, first path first.
std::vector<double> in_turns(const std::vector<double>& first, const std::vector<double>& second) {
  std::vector<double> seconds;
  for (std::size_t c = 0; c < first.size(); ++c) {
    seconds.push_back(first[c]);
    seconds.push_back(second[c]);
  }
  return seconds;
}

TEST(path_trial, ends_when_the_time_is_spent_and_the_paths_lie_apart) {
  // 0.2 s against 0.3 s a call, each path's two calls 0.01 s apart.
  const auto first_faster = path_trial::judge(in_turns({0.21, 0.2}, {0.3, 0.31}));
  EXPECT_TRUE(first_faster.done);
  EXPECT_TRUE(first_faster.first_faster);
  const auto second_faster = path_trial::judge(in_turns({0.3, 0.31}, {0.21, 0.2}));
  EXPECT_TRUE(second_faster.done);
  EXPECT_FALSE(second_faster.first_faster);
}

TEST(path_trial, goes_on_while_the_calls_have_taken_less_than_its_time) {
  // 1 ms against 2 ms: apart, but 6 ms spent of 50.
  EXPECT_FALSE(path_trial::judge(in_turns({0.001, 0.001}, {0.002, 0.002})).done);
  // At the most calls it ends all the same.
  const auto v = path_trial::judge(
      in_turns(std::vector<double>(path_trial::most_calls, 0.001), std::vector<double>(path_trial::most_calls, 0.002)));
  EXPECT_TRUE(v.done);
  EXPECT_TRUE(v.first_faster);
}

TEST(path_trial, goes_on_while_the_paths_lie_within_their_own_spread) {
  // Calls of about 450 ms on a busy machine: after two of each the second path's fastest is the
  // faster by 0.01 s, while each path's two calls differ by 0.04 s.
  EXPECT_FALSE(path_trial::judge(in_turns({0.48, 0.44}, {0.47, 0.43})).done);
  // Two more of each show the first path the faster by more than either path's spread.
  const auto v = path_trial::judge(in_turns({0.48, 0.44, 0.37, 0.36}, {0.47, 0.43, 0.45, 0.46}));
  EXPECT_TRUE(v.done);
  EXPECT_TRUE(v.first_faster);
  // Paths that never come apart end at the most calls, the first kept on a tie.
  const auto tie = path_trial::judge(
      in_turns(std::vector<double>(path_trial::most_calls, 0.4), std::vector<double>(path_trial::most_calls, 0.4)));
  EXPECT_TRUE(tie.done);
  EXPECT_TRUE(tie.first_faster);
  EXPECT_FALSE(path_trial::judge(in_turns(std::vector<double>(path_trial::most_calls - 1, 0.4),
                                          std::vector<double>(path_trial::most_calls - 1, 0.4)))
                   .done);
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
