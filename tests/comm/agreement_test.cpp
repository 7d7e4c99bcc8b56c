// Ranks that call one collective with different counts, roots, reductions or element types, in its
// blocking and its started (i...) forms, or different collectives, are stopped before any data moves, on every backend
// (the MPI build has SHARDWISE_CHECK_AGREEMENT on): every rank throws argument_error naming its own call and another
// rank's, and the ranks are still in step afterwards. Without the check, MPI would hang or corrupt.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "support/backends.hpp"

namespace {

using namespace shardwise;
using namespace shardwise::testing;

template <class Backend>
class agreement : public ::testing::Test {};
TYPED_TEST_SUITE(agreement, backends);

// The last rank makes the odd call. Rank r's error names its own call first, then the first rank whose
// call differs: the last rank for the others, rank 0 for the last.
template <class Communicator>
class disagreement_check {
 public:
  explicit disagreement_check(Communicator& comm) : comm_(comm) {}
  [[nodiscard]] bool odd() const { return comm_.rank() == comm_.size() - 1; }

  // `call` throws on every rank: "[rank r] <operation>: rank r called <mine> while rank s called <theirs>",
  // where a started call is named by its i... form and the operation without the i.
  template <class Call>
  void expect(const std::string& what, Call&& call, const std::string& common, const std::string& odd_one) {
    const int rank = comm_.world_rank();
    const int other = odd() ? 0 : comm_.size() - 1;
    const std::string& mine = odd() ? odd_one : common;
    const std::string& theirs = odd() ? common : odd_one;
    const std::size_t started = mine.starts_with('i') ? 1 : 0;  // no collective's own name starts with i
    const std::string operation = mine.substr(started, mine.find_first_of("<(") - started);
    const std::string expected = "[rank " + std::to_string(rank) + "] " + operation + ": rank " + std::to_string(rank) +
                                 " called " + mine + " while rank " + std::to_string(other) + " called " + theirs;
    try {
      call();
      ADD_FAILURE() << what << ": rank " << rank << " completed a call the others disagree with";
    } catch (const argument_error& e) {
      EXPECT_EQ(std::string(e.what()), expected) << what;
      EXPECT_EQ(e.rank(), rank) << what;
    }
    // Still in step: the same call everywhere completes.
    std::vector<std::int64_t> one{1};
    comm_.all_reduce(one);
    EXPECT_EQ(one[0], comm_.size()) << "after " << what;
  }

 private:
  Communicator& comm_;
};

TYPED_TEST(agreement, different_counts_roots_reductions_element_types_and_operations_throw_naming_both_calls) {
  TypeParam::run(
      [](communicator auto& comm) {
        disagreement_check check(comm);
        const bool odd = check.odd();
        const auto ranks = static_cast<std::size_t>(comm.size());
        for (const bool started : {false, true}) {
          const std::string form = started ? " (started)" : "";
          const std::string i = started ? "i" : "";
          // Counts.
          std::vector<float> data(odd ? 9 : 8, 1.0F);
          check.expect(
              "count" + form,
              [&] {
                if (started) comm.iall_reduce(data).wait();
                else
                  comm.all_reduce(data);
              },
              i + "all_reduce<float>(8 elements, sum)", i + "all_reduce<float>(9 elements, sum)");
          // Roots.
          std::vector<std::int32_t> message(4, 7);
          check.expect(
              "root" + form,
              [&] {
                if (started) comm.ibroadcast(message, odd ? 1 : 0).wait();
                else
                  comm.broadcast(message, odd ? 1 : 0);
              },
              i + "broadcast<int32>(4 elements, root 0)", i + "broadcast<int32>(4 elements, root 1)");
          // Reductions.
          std::vector<double> values(3, 2.0);
          check.expect(
              "reduction" + form,
              [&] {
                if (started) comm.ireduce(values, odd ? op::max : op::sum, 0).wait();
                else
                  comm.reduce(values, odd ? op::max : op::sum, 0);
              },
              i + "reduce<double>(3 elements, sum, root 0)", i + "reduce<double>(3 elements, max, root 0)");
          // Element types.
          std::vector<float> floats(5, 1.0F);
          std::vector<double> doubles(5, 1.0);
          check.expect(
              "element type" + form,
              [&] {
                if (odd) started ? comm.iall_reduce(doubles).wait() : comm.all_reduce(doubles);
                else
                  started ? comm.iall_reduce(floats).wait() : comm.all_reduce(floats);
              },
              i + "all_reduce<float>(5 elements, sum)", i + "all_reduce<double>(5 elements, sum)");
          // Operations.
          std::vector<std::int64_t> block(2), blocks(2 * ranks);
          check.expect(
              "operation" + form,
              [&] {
                if (odd) started ? comm.iall_gather(block, blocks).wait() : comm.all_gather(block, blocks);
                else
                  started ? comm.ibarrier().wait() : comm.barrier();
              },
              i + "barrier()", i + "all_gather<int64>(2 elements)");
          // The blocking form against the started one, which MPI would never match: the odd rank's call
          // is the other form.
          const std::string other = started ? "" : "i";
          std::vector<float> eight(8, 1.0F);
          check.expect(
              "form" + form,
              [&] {
                if (started != odd) comm.iall_reduce(eight).wait();
                else
                  comm.all_reduce(eight);
              },
              i + "all_reduce<float>(8 elements, sum)", other + "all_reduce<float>(8 elements, sum)");
        }
        // Uneven all-to-all: the odd rank expects two elements from rank 0, which sends it one.
        std::vector<int> send_counts(ranks, 1), receive_counts(ranks, 1);
        if (odd) receive_counts[0] = 2;
        std::vector<float> in(ranks), out(ranks + (odd ? 1 : 0));
        const int last = comm.size() - 1;
        const std::string expected = "[rank " + std::to_string(comm.world_rank()) +
                                     "] all_to_all_v: rank 0 sends 1 element to rank " + std::to_string(last) +
                                     ", which expects 2 from it";
        for (const bool started : {false, true}) {
          try {
            if (started) comm.iall_to_all_v(in, send_counts, out, receive_counts).wait();
            else
              comm.all_to_all_v(in, send_counts, out, receive_counts);
            ADD_FAILURE() << "uneven counts that disagree were accepted";
          } catch (const argument_error& e) {
            EXPECT_EQ(std::string(e.what()), expected);
          }
        }
        // A communicator split on some ranks only meets a barrier on the others.
        check.expect(
            "split",
            [&] {
              if (odd) (void)comm.split(0, 0);
              else
                comm.barrier();
            },
            "barrier()", "split()");
      },
      {2, 3, 4});
}

// A started collective that fails its check leaves the ones started after it intact: they start, in
// order, once waited on.
TYPED_TEST(agreement, collectives_started_after_a_disagreement_still_complete) {
  TypeParam::run(
      [](communicator auto& comm) {
        const bool odd = comm.rank() == comm.size() - 1;
        std::vector<float> mismatched(odd ? 2 : 3, 1.0F);
        std::vector<std::int32_t> sum{comm.rank()};
        std::vector<double> maximum{static_cast<double>(comm.rank())};
        auto failing = comm.iall_reduce(mismatched);
        auto first = comm.iall_reduce(sum);
        auto second = comm.iall_reduce(maximum, op::max);
        second.wait();
        first.wait();
        EXPECT_THROW(failing.wait(), argument_error);
        EXPECT_EQ(sum[0], comm.size() * (comm.size() - 1) / 2);
        EXPECT_EQ(maximum[0], comm.size() - 1);
      },
      {2, 3, 4});
}

}  // namespace
