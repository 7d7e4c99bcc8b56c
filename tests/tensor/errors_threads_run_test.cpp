// The errors test (errors_test.cpp) on threads::run: which error surfaces when one rank fails, and what
// the ranks it stopped say (errors_checks.hpp), compiled on its own.
#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "shardwise/comm/threads.hpp"
#include "shardwise/core/error.hpp"
#include "shardwise/layout/cube_3d.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/nn/linear.hpp"
#include "shardwise/ops/matmul.hpp"
#include "shardwise/tensor/distribute.hpp"
#include "support/faulty_communicator.hpp"
#include "tensor/errors_checks.hpp"

namespace {

using namespace shardwise;
using namespace shardwise::testing;

// ---- threads::run: which error surfaces (these run under the threads backend only)

constexpr int failing_rank = 2;

// Runs `body(faulty world)` on 4 ranks, with rank 2's first collective named `call` failing, `times`
// times. Each time, run() must rethrow rank 2's own error with message `expected`, and every other
// rank must have thrown peer_error naming rank 2 (saying why, when `with_reason`).
template <class Body>
void expect_rank_2_every_time(int times, std::string_view call, const std::string& expected, bool with_reason,
                              Body&& body) {
  for (int attempt = 0; attempt < times; ++attempt) {
    std::mutex mutex;
    std::vector<std::string> stopped;
    try {
      threads::run(4, [&](threads::communicator& world) {
        faulty_communicator faulty(world.split(0, world.rank()), failing_rank, call);
        try {
          body(faulty);
        } catch (const peer_error& e) {
          std::lock_guard lock(mutex);
          stopped.push_back(e.what());
          throw;
        }
      });
      FAIL() << "attempt " << attempt << ": the injected fault did not surface";
    } catch (const peer_error& e) {
      FAIL() << "attempt " << attempt << ": run() reported a rank the failure stopped: " << e.what();
    } catch (const error& e) {
      ASSERT_EQ(e.rank(), failing_rank) << "attempt " << attempt << ": " << e.what();
      ASSERT_EQ(std::string(e.what()), expected) << "attempt " << attempt;
    }
    ASSERT_EQ(stopped.size(), 3U) << "attempt " << attempt;
    for (const std::string& text : stopped) {
      const std::string stop = "stopped because rank 2 failed" + (with_reason ? ": " + expected.substr(9) : "");
      ASSERT_NE(text.find(stop), std::string::npos) << "attempt " << attempt << ": " << text;
      ASSERT_EQ(text.find("[rank", 1), std::string::npos) << text;
    }
  }
}

// The others wait in the collective rank 2 never joins: its error reaches them, reason and all.
TEST(threads_run_errors, a_failed_redistribute_surfaces_as_the_failing_ranks_error_every_time) {
  expect_rank_2_every_time(100, "all_to_all_v",
                           "[rank 2] redistribute(row_1d<> → col_1d<>, 8x8): all_to_all_v: injected fault", true,
                           [](auto& world) {
                             process_mesh line(world, {4});
                             const auto t = from_function<row_1d<>>(line, {8, 8}, value);
                             (void)redistribute<col_1d<>>(t);
                           });
}

// Rank 2 fails while collectives it started are outstanding, so its peers are stopped while its error
// is still on its way up (they know that rank 2 failed, not yet why): still rank 2's error surfaces.
TEST(threads_run_errors, a_failed_pipelined_product_surfaces_as_the_failing_ranks_error_every_time) {
  expect_rank_2_every_time(
      500, "reduce_scatter",
      "[rank 2] matmul(cube_3d<>::input 16x8, cube_3d<>::weight 8x12, chunks 4): reduce_scatter: injected fault", false,
      [](auto& world) {
        process_mesh cube(world, {1, 2, 2});
        const auto a = from_function<cube_3d<>::input>(cube, {16, 8}, value);
        const auto b = from_function<cube_3d<>::weight>(cube, {8, 12}, value);
        (void)matmul(a, b, {.chunks = 4});
      });
}

// Through nested calls (a layer, its product's ring of messages) each error names its rank once.
TEST(threads_run_errors, a_failure_in_nested_calls_names_each_call_and_each_rank_once) {
  expect_rank_2_every_time(
      500, "send",
      "[rank 2] nn::linear::forward(col_1d<padded> 8x6): "
      "all_gather_matmul(col_1d<padded> 8x6, row_1d<padded> 6x4): send: injected fault",
      false, [](auto& world) {
        process_mesh line(world, {4});
        nn::linear<double, col_1d<padded>, row_1d<padded>, std::remove_cvref_t<decltype(line)>> layer(line, 6, 4, 1);
        (void)layer.forward(from_function<col_1d<padded>>(line, {8, 6}, value));
      });
}

}  // namespace
