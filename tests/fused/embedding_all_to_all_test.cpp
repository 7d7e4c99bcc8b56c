// The fused embedding-bag + all-to-all on every backend (threads, MPI, sim_gpu): fused and baseline
// outputs are bitwise equal to each other and to the serial Eigen computation, for uneven bags (empty
// ones too), table counts that do not divide the ranks (some ranks own none), batches and slice sizes
// that do not divide each other, slices of more than 64 rows (tasks), sum and mean pooling, every slice
// order, slices stored in place (threads, MPI on one node, sim_gpu), sent as messages, and both at once
// (ranks grouped as if on several nodes), and repeated calls (new lookups every call, so a flag or
// bitmask left from an earlier call would show), with a rank that holds its result while its peers
// run ahead; and the baseline's pooling alone, each rank's tables' columns of the serial output.
#include "shardwise/fused/embedding_all_to_all.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <concepts>
#include <cstring>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "fused/embedding_data.hpp"
#include "shardwise/sim/presets.hpp"
#include "shardwise/sim/sim_gpu.hpp"
#include "support/backends.hpp"
#include "support/messages.hpp"

namespace {

using namespace shardwise;
using shardwise::testing::embedding_matrix;

template <class Backend>
class fused_embedding : public ::testing::Test {};
TYPED_TEST_SUITE(fused_embedding, shardwise::testing::backends);

// Rows [first_row, first_row + rows) and columns [first_column, first_column + columns) of the serial
// output, compared bit for bit with `got` ({rows, columns}, row-major).
void expect_block_of_serial(const embedding_matrix& serial, std::int64_t first_row, std::int64_t rows,
                            std::int64_t first_column, std::int64_t columns, std::span<const float> got,
                            const std::string& what) {
  ASSERT_EQ(got.size(), static_cast<std::size_t>(rows * columns)) << what;
  for (std::int64_t row = 0; row < rows; ++row)
    for (std::int64_t column = 0; column < columns; ++column) {
      const float value = got[static_cast<std::size_t>(row * columns + column)];
      const float expected = serial(first_row + row, first_column + column);
      if (std::memcmp(&value, &expected, sizeof(float)) != 0) {
        ADD_FAILURE() << what << ": row " << first_row + row << ", column " << first_column + column << " is " << value
                      << ", serially " << expected;
        return;
      }
    }
}

// This rank's rows of the serial output.
void expect_rows_of_serial(const embedding_matrix& serial, const fused::embedding_plan& plan, int rank,
                           std::span<const float> out, const std::string& what) {
  expect_block_of_serial(serial, plan.first_row(rank), plan.rows_of(rank), 0, plan.row_width(), out,
                         what + ", rank " + std::to_string(rank));
}

// The baseline's pooling alone on this rank: every row of the global batch, this rank's tables' columns.
void expect_pooled_columns_of_serial(const embedding_matrix& serial, const fused::embedding_plan& plan, int rank,
                                     std::span<const float> pooled, const std::string& what) {
  expect_block_of_serial(serial, 0, plan.shape().global_batch, plan.column_of(plan.first_table(rank)),
                         plan.width_of(rank), pooled, what + ", rank " + std::to_string(rank));
}

bool simulated(const auto& comm) { return std::same_as<std::remove_cvref_t<decltype(comm)>, sim_gpu::communicator>; }

struct configuration {
  fused::embedding_shape shape;
  std::int64_t slice_rows;
  fused::slice_order order;
  fused::pooling pooling;
};

// How the ranks share memory: all (the backend's default), none (share_memory off), or groups of 2 or 3
// consecutive ranks, as if each group were a node (stores within, messages between; sim_gpu has its
// own nodes).
struct sharing {
  bool share_memory;
  int ranks_per_node;
  [[nodiscard]] std::string name() const {
    if (!share_memory) return "messages";
    return ranks_per_node == 0 ? "in place" : "nodes of " + std::to_string(ranks_per_node);
  }
  [[nodiscard]] fused::embedding_options options() const {
    fused::embedding_options options;
    options.share_memory = share_memory;
    options.ranks_per_node = ranks_per_node;
    return options;
  }
  // Whether rank stores into peer's output (its own always), and whether it does so for every peer.
  [[nodiscard]] bool stores(const auto& comm, int rank, int peer) const {
    if (rank == peer) return true;
    if (simulated(comm)) {  // the test backend's MI210s: nodes of two when P is even (support/backends.hpp)
      const int per_node = comm.size() % 2 == 0 ? 2 : comm.size();
      return rank / per_node == peer / per_node;
    }
    return share_memory && (ranks_per_node == 0 || rank / ranks_per_node == peer / ranks_per_node);
  }
  [[nodiscard]] bool stores_everywhere(const auto& comm) const {
    for (int peer = 0; peer < comm.size(); ++peer)
      if (!stores(comm, comm.rank(), peer) || !stores(comm, 0, peer)) return false;
    return true;
  }
};

std::vector<sharing> sharings(const auto& comm) {
  if (simulated(comm)) return {{true, 0}};
  return {{true, 0}, {false, 0}, {true, 2}, {true, 3}};
}

void expect_stores_in_place(const auto& op, const auto& comm, const sharing& how, const std::string& what) {
  for (int peer = 0; peer < comm.size(); ++peer)
    EXPECT_EQ(op.stores_in_place(peer), how.stores(comm, comm.rank(), peer))
        << what << ", rank " << comm.rank() << " to " << peer;
}

const configuration configurations[] = {
    {{11, 8, 37}, 3, fused::slice_order::communication_aware, fused::pooling::sum},
    {{5, 4, 29}, 70, fused::slice_order::oblivious, fused::pooling::mean},  // 8 ranks: some own no table
    {{3, 80, 130},
     129,
     fused::slice_order::communication_aware,
     fused::pooling::mean},  // rows pooled in 32s and a rest
    {{4, 8, 1100},
     1000,
     fused::slice_order::communication_aware,
     fused::pooling::sum},  // done-bitmasks of several words
    {{13, 8, 45}, 4, fused::slice_order::table_by_table, fused::pooling::mean},
    {{1, 1, 1}, 1, fused::slice_order::oblivious, fused::pooling::sum},
};

TYPED_TEST(fused_embedding, fused_and_baseline_equal_the_serial_computation_call_after_call) {
  TypeParam::run([](communicator auto& comm) {
    for (const auto& how : sharings(comm))
      for (const auto& c : configurations) {
        const std::string what = std::to_string(c.shape.tables) + " tables, batch " +
                                 std::to_string(c.shape.global_batch) + ", slices of " + std::to_string(c.slice_rows) +
                                 ", " + how.name();
        auto options = how.options();
        options.slice_rows = c.slice_rows;
        options.order = c.order;
        options.pooling = c.pooling;
        fused::embedding_all_to_all op(comm, c.shape, options);
        expect_stores_in_place(op, comm, how, what);
        EXPECT_EQ(op.forward_row_stores(fused::path::fused), fused::row_stores::cached) << what;
        EXPECT_EQ(op.forward_row_stores(fused::path::baseline), fused::row_stores::cached) << what;
        EXPECT_FALSE(op.measuring_row_stores(fused::path::automatic)) << what << ": nothing to choose";
        for (int call = 0; call < 3; ++call) {
          const shardwise::testing::rank_inputs in(op.plan(), comm.rank(), call);
          const auto serial = shardwise::testing::serial_embedding(c.shape, c.pooling, call);
          const auto fused_out = op.fused(in.table_spans, in.bag_spans);
          expect_rows_of_serial(serial, op.plan(), comm.rank(), fused_out,
                                what + ", fused call " + std::to_string(call));
          const std::vector<float> kept(fused_out.begin(), fused_out.end());
          const auto baseline_out = op.baseline(in.table_spans, in.bag_spans);
          EXPECT_EQ(baseline_out.size(), kept.size()) << what;
          // Bit for bit over what both hold (not an ASSERT: a rank leaving the body would leave its peers
          // waiting); a rank that receives no rows holds none, and memcmp must not be given its null data.
          const auto both = std::min(kept.size(), baseline_out.size());
          EXPECT_TRUE(both == 0 || std::memcmp(kept.data(), baseline_out.data(), both * sizeof(float)) == 0) << what;
          expect_rows_of_serial(serial, op.plan(), comm.rank(), op(in.table_spans, in.bag_spans),
                                what + ", operator()");
          expect_pooled_columns_of_serial(serial, op.plan(), comm.rank(),
                                          op.pooling_alone(in.table_spans, in.bag_spans), what + ", pooling alone");
        }
        EXPECT_EQ(op.epoch(), 9U);
      }
  });
}

// Where a rank writes 4 MiB or more in a call (its tables' width for the whole batch), each path's first
// calls store their rows around the caches and through them by turns and keep the faster (with a machine
// model, around them), fenced before peers read them: the serial bits either way, stored in place, as
// messages, and within nodes (two calls of each path); then, to the trial's end on 4 ranks storing in
// place, each path keeps one kind, the same on every rank.
TYPED_TEST(fused_embedding, rows_stored_around_or_through_the_caches_are_the_serial_computation) {
  TypeParam::run([](communicator auto& comm) {
    const fused::embedding_shape shape{comm.size(), 256, 4096};  // a table a rank: 4096 × 256 floats
    const std::set<fused::row_stores> both{fused::row_stores::cached, fused::row_stores::streaming};
    const auto serial = shardwise::testing::serial_embedding(shape, fused::pooling::sum, 0);
    const auto all = sharings(comm);
    for (const auto& how : all) {
      const bool to_the_end = &how == &all.front() && comm.size() == 4;
      fused::embedding_all_to_all op(comm, shape, how.options());
      EXPECT_EQ(op.measuring_row_stores(fused::path::automatic), !simulated(comm)) << how.name();
      EXPECT_THROW((void)op.forward_row_stores(fused::path::automatic), argument_error);
      const shardwise::testing::rank_inputs in(op.plan(), comm.rank(), 0);
      std::set<fused::row_stores> fused_stores, baseline_stores;
      // Every rank ends its trial at the same call, so all leave the loop together.
      const auto go_on = [&](int call) {
        if (!to_the_end) return call < 2;
        return call < 2 * op.most_trial_calls && (call == 0 || op.measuring_row_stores(fused::path::automatic));
      };
      for (int call = 0; go_on(call); ++call) {
        const std::string what = how.name() + ", call " + std::to_string(call);
        fused_stores.insert(op.forward_row_stores(fused::path::fused));
        expect_rows_of_serial(serial, op.plan(), comm.rank(), op.fused(in.table_spans, in.bag_spans), what + ", fused");
        baseline_stores.insert(op.forward_row_stores(fused::path::baseline));
        expect_rows_of_serial(serial, op.plan(), comm.rank(), op.baseline(in.table_spans, in.bag_spans),
                              what + ", baseline");
      }
      const std::set<fused::row_stores> tried = simulated(comm) ? std::set{fused::row_stores::streaming} : both;
      EXPECT_EQ(fused_stores, tried) << how.name();
      EXPECT_EQ(baseline_stores, tried) << how.name();
      if (!to_the_end) continue;
      EXPECT_FALSE(op.measuring_row_stores(fused::path::automatic)) << how.name() << ": the trial did not end";
      for (const auto which : {fused::path::fused, fused::path::baseline}) {
        const auto kept = op.forward_row_stores(which);
        std::array<int, 2> kinds{kept == fused::row_stores::streaming ? 1 : 0, 1};
        comm.all_reduce(std::span<int>(kinds), shardwise::op::sum);
        EXPECT_TRUE(kinds[0] == 0 || kinds[0] == kinds[1]) << how.name() << ": ranks chose differently";
        (void)(which == fused::path::fused ? op.fused(in.table_spans, in.bag_spans)
                                           : op.baseline(in.table_spans, in.bag_spans));
        EXPECT_EQ(op.forward_row_stores(which), kept) << how.name() << ": the choice is kept";
      }
    }
  });
}

// Peers store a call's results into the owner's other output while it reads this one; two calls on, they
// reach this one again and must wait until the owner has called again. Rank 0 holds each result a while
// before checking it: with fewer tables than ranks it owns none, so its peers need nothing from it and
// would run two calls ahead if nothing held them.
TYPED_TEST(fused_embedding, a_result_stays_valid_until_its_owner_calls_again) {
  TypeParam::run([](communicator auto& comm) {
    const fused::embedding_shape shape{2, 5, 17};
    for (const auto& how : sharings(comm)) {
      auto options = how.options();
      options.slice_rows = 2;
      fused::embedding_all_to_all op(comm, shape, options);
      for (int call = 0; call < 4; ++call) {
        const shardwise::testing::rank_inputs in(op.plan(), comm.rank(), call);
        const auto out = op.fused(in.table_spans, in.bag_spans);
        if (comm.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        expect_rows_of_serial(shardwise::testing::serial_embedding(shape, fused::pooling::sum, call), op.plan(),
                              comm.rank(), out, how.name() + ", held after call " + std::to_string(call));
      }
    }
  });
}

// Without a machine model, where every slice is stored in place, the automatic order goes table by
// table and a slice is a destination's whole rows of a table; elsewhere remote slices go first, in the
// paper's slices of 32 rows. sim_gpu has a model, which chooses the slice size (gpu_initiated_test).
TYPED_TEST(fused_embedding, the_automatic_order_and_slice_size_follow_where_slices_are_stored_in_place) {
  TypeParam::run([](communicator auto& comm) {
    // ctest runs every MPI test on one machine, where the ranks share memory.
    for (const auto& how : sharings(comm)) {
      const auto shape = configurations[0].shape;
      const fused::embedding_all_to_all op(comm, shape, how.options());
      expect_stores_in_place(op, comm, how, how.name());
      const bool in_place = how.stores_everywhere(comm) && !simulated(comm);
      EXPECT_EQ(op.plan().order(),
                in_place ? fused::slice_order::table_by_table : fused::slice_order::communication_aware)
          << how.name();
      if (!simulated(comm)) {
        EXPECT_EQ(op.plan().slice_rows(),
                  in_place ? ceil_divide(shape.global_batch, std::int64_t{comm.size()}) : fused::paper_slice_rows)
            << how.name() << ", " << comm.size() << " ranks";
      }
    }
  });
  EXPECT_THROW(fused::embedding_plan({2, 1, 2}, 2, 1, fused::slice_order::automatic), argument_error);
}

TYPED_TEST(fused_embedding, ranks_per_node_and_peers_out_of_range_are_refused) {
  TypeParam::run([](communicator auto& comm) {
    fused::embedding_options options;
    options.ranks_per_node = -1;
    EXPECT_THROW(fused::embedding_all_to_all(comm, configurations[0].shape, options), argument_error);
    options.ranks_per_node = 0;
    const fused::embedding_all_to_all op(comm, configurations[0].shape, options);
    EXPECT_THROW((void)op.stores_in_place(comm.size()), argument_error);
    EXPECT_THROW((void)op.stores_in_place(-1), argument_error);
    options.ranks_per_node = 2;
    if (simulated(comm)) {
      EXPECT_THROW(fused::embedding_all_to_all(comm, configurations[0].shape, options), argument_error);
    }
  });
}

TYPED_TEST(fused_embedding, without_a_machine_model_operator_times_both_paths_then_every_rank_keeps_one) {
  TypeParam::run([](communicator auto& comm) {
    const configuration& c = configurations[0];
    fused::embedding_all_to_all op(comm, c.shape);
    if constexpr (std::same_as<std::remove_cvref_t<decltype(comm)>, sim_gpu::communicator>) {
      EXPECT_FALSE(op.measuring()) << "sim_gpu has a machine model to decide by";
      return;
    }
    using operator_type = decltype(op);
    // The trial runs the paths in pairs, fused first in every other pair, for a number of pairs within
    // its bounds (how many depends on how long they take, so it is read, not assumed), and then keeps
    // one path.
    int trial = 0;
    for (int call = 0; call < 2 * operator_type::most_trial_calls + 2; ++call) {
      if (op.measuring()) {
        EXPECT_EQ(trial, call) << "the trial resumed after it had ended";
        EXPECT_EQ(op.fuses(), (call % 2 == 0) == (call / 2 % 2 == 0))
            << "the trial runs fused first in every other pair; call " << call;
        ++trial;
      }
      const shardwise::testing::rank_inputs in(op.plan(), comm.rank(), call);
      expect_rows_of_serial(shardwise::testing::serial_embedding(c.shape, fused::pooling::sum, call), op.plan(),
                            comm.rank(), op(in.table_spans, in.bag_spans), "operator() call " + std::to_string(call));
    }
    EXPECT_FALSE(op.measuring());
    EXPECT_EQ(trial % 2, 0);
    EXPECT_GE(trial, 2 * operator_type::least_trial_calls);
    EXPECT_LE(trial, 2 * operator_type::most_trial_calls);
    std::vector<int> lengths(static_cast<std::size_t>(comm.size()));
    comm.all_gather(std::span<const int>(&trial, 1), lengths);
    for (const int theirs : lengths) EXPECT_EQ(theirs, trial) << "ranks measured for different numbers of calls";
    // Every rank took the same path (ranks on different paths would wait for each other until the timeout).
    const int mine = op.fuses() ? 1 : 0;
    std::vector<int> everyone(static_cast<std::size_t>(comm.size()));
    comm.all_gather(std::span<const int>(&mine, 1), everyone);
    for (const int theirs : everyone) EXPECT_EQ(theirs, mine);
  });
}

TYPED_TEST(fused_embedding, given_a_machine_model_threads_and_mpi_decide_by_it_as_one) {
  TypeParam::run([](communicator auto& comm) {
    if (simulated(comm)) return;  // sim_gpu decides by its own machine (the test above)
    fused::embedding_options options;
    options.machine = sim::presets::mi210_nodes(comm.size(), 1);
    options.slice_rows = fused::automatic_slice_rows;
    const configuration& c = configurations[0];
    fused::embedding_all_to_all op(comm, c.shape, options);
    EXPECT_FALSE(op.measuring()) << "a machine model was given to decide by";
    // What the model says, worked out here too: the operator's choices are rank 0's, broadcast.
    const auto best =
        fused::best_slice_rows(c.shape, comm.size(), op.plan().order(), *options.machine, options.gpu_initiated, 1);
    EXPECT_EQ(op.plan().slice_rows(), best.rows);
    EXPECT_EQ(op.fuses(), best.times.fused <= best.times.baseline);
    const std::array<std::int64_t, 2> mine = {op.plan().slice_rows(), op.fuses() ? 1 : 0};
    std::vector<std::int64_t> everyone(2 * static_cast<std::size_t>(comm.size()));
    comm.all_gather(std::span<const std::int64_t>(mine), everyone);
    for (std::size_t r = 0; r < everyone.size(); r += 2) {
      EXPECT_EQ(everyone[r], mine[0]) << "rank " << r / 2 << "'s slice size";
      EXPECT_EQ(everyone[r + 1], mine[1]) << "rank " << r / 2 << "'s path";
    }
    const shardwise::testing::rank_inputs in(op.plan(), comm.rank(), 0);
    expect_rows_of_serial(shardwise::testing::serial_embedding(c.shape, fused::pooling::sum, 0), op.plan(), comm.rank(),
                          op(in.table_spans, in.bag_spans), "operator() with a machine model");
    if (comm.size() > 1) {
      options.machine = sim::presets::mi210_nodes(comm.size() - 1, 1);
      try {
        const fused::embedding_all_to_all too_small(comm, c.shape, options);
        ADD_FAILURE() << "a machine of fewer devices than ranks was taken";
      } catch (const argument_error& e) {
        EXPECT_NE(std::string(e.what()).find("models " + std::to_string(comm.size() - 1) + " devices"),
                  std::string::npos)
            << e.what();
      }
    }
  });
}

TYPED_TEST(fused_embedding, a_bad_index_or_offsets_throw_naming_the_values) {
  TypeParam::run([](communicator auto& comm) {
    const fused::embedding_shape shape{comm.size(), 2, 4};  // one table per rank
    fused::embedding_all_to_all op(comm, shape);
    std::vector<float> table(3 * 2, 1.0F);
    const std::vector<std::int64_t> offsets{0, 1, 1, 2, 2}, indices{0, 3};  // row 3 of a 3-row table
    const std::span<const float> tables[] = {table};
    const fused::embedding_bags bags[] = {{offsets, indices}};
    EXPECT_EQ(shardwise::testing::message_of<argument_error>([&] { (void)op.baseline(tables, bags); }),
              "[rank " + std::to_string(comm.world_rank()) +
                  "] embedding_all_to_all: index 3 (table 0, bag 2) is outside a table of 3 rows");
    const std::vector<std::int64_t> short_offsets{0, 1};
    const fused::embedding_bags too_few[] = {{short_offsets, indices}};
    EXPECT_THROW((void)op.fused(tables, too_few), argument_error);
  });
}

}  // namespace
