// The plan's slice orders; the GPU-initiated primitives: epoch flags (a stale epoch never satisfies a
// wait; waits block and time out), the message queue
// and the persistent kernel's modelled time, a timed-out wait of the fused operator naming the slice,
// the peer and the flag, the sim_gpu run giving the times the cost model predicts, and the automatic
// fallback to the baseline where the model predicts no gain.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <initializer_list>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "fused/embedding_data.hpp"
#include "shardwise/comm/shared/done_bitmask.hpp"
#include "shardwise/comm/shared/epoch_flags.hpp"
#include "shardwise/comm/threads.hpp"
#include "shardwise/fused/embedding_all_to_all.hpp"
#include "shardwise/fused/embedding_cost.hpp"
#include "shardwise/nn/sparse_parameter.hpp"
#include "shardwise/sim/message_queue.hpp"
#include "shardwise/sim/persistent_kernel.hpp"
#include "shardwise/sim/presets.hpp"
#include "shardwise/sim/sim_gpu.hpp"
#include "support/messages.hpp"

namespace {

using namespace shardwise;
using shardwise::testing::message_of;
using namespace std::chrono_literals;

auto soon(std::chrono::steady_clock::duration d) { return std::chrono::steady_clock::now() + d; }

// The orders the plan documents (fused/embedding_plan.hpp), on 4 ranks whose last owns two of the 5
// tables, a slice per table and destination. Forward, communication-aware: every table's slices for
// the other ranks round the ring from the next rank, so no two ranks start on the same peer, then its
// own; table by table: each table's own slice right after its others; oblivious: destinations in batch
// order. Backward: an owner adds its sources' rows in the order they arrive, itself first, since each
// source sends to its next rank first.
TEST(embedding_plan, slices_go_round_the_ring_from_the_next_rank_and_come_back_in_the_order_they_arrive) {
  constexpr int P = 4;
  const fused::embedding_shape shape{5, 2, 8};
  const auto tables_and_destinations = [&](fused::slice_order order, int rank) {
    std::vector<std::pair<int, int>> walk;
    for (const auto& slice : fused::embedding_plan(shape, P, 2, order).slices(rank))
      walk.emplace_back(slice.table, slice.destination);
    return walk;
  };
  using walk = std::vector<std::pair<int, int>>;
  EXPECT_EQ(tables_and_destinations(fused::slice_order::communication_aware, 1),
            (walk{{1, 2}, {1, 3}, {1, 0}, {1, 1}}));
  EXPECT_EQ(tables_and_destinations(fused::slice_order::communication_aware, 3),
            (walk{{3, 0}, {3, 1}, {3, 2}, {4, 0}, {4, 1}, {4, 2}, {3, 3}, {4, 3}}));
  EXPECT_EQ(tables_and_destinations(fused::slice_order::table_by_table, 3),
            (walk{{3, 0}, {3, 1}, {3, 2}, {3, 3}, {4, 0}, {4, 1}, {4, 2}, {4, 3}}));
  EXPECT_EQ(tables_and_destinations(fused::slice_order::oblivious, 3),
            (walk{{3, 0}, {4, 0}, {3, 1}, {4, 1}, {3, 2}, {4, 2}, {3, 3}, {4, 3}}));

  const fused::embedding_plan plan(shape, P, 2, fused::slice_order::communication_aware);
  for (int owner = 0; owner < P; ++owner) {
    EXPECT_EQ(plan.gradient_source(owner, 0), owner);
    for (int k = 1; k < P; ++k) {
      const int source = plan.gradient_source(owner, k);
      std::vector<int> owners_in_order;
      for (const auto& slice : plan.gradient_slices(source))
        if (owners_in_order.empty() || owners_in_order.back() != slice.destination)
          owners_in_order.push_back(slice.destination);
      ASSERT_EQ(owners_in_order.size(), P - 1U) << "source " << source;
      EXPECT_EQ(owners_in_order[static_cast<std::size_t>(k - 1)], owner)
          << "owner " << owner << " adds source " << source << "'s rows at step " << k
          << ", but the source sends them at another";
    }
  }
}

TEST(epoch_flags, a_signal_of_an_earlier_call_never_satisfies_a_later_wait) {
  epoch_flags flags(2);
  flags.raise(1, 3);
  EXPECT_TRUE(flags.wait(1, 3, soon(1ms)));
  EXPECT_FALSE(flags.wait(1, 4, soon(20ms))) << "epoch 3 satisfied a wait for epoch 4";
  flags.raise(1, 2);  // a late signal of call 2
  EXPECT_EQ(flags.seen(1), 3U) << "a late signal lowered the flag";
  EXPECT_FALSE(flags.wait(0, 1, soon(1ms)));
}

TEST(epoch_flags, a_wait_sleeps_until_another_thread_raises_the_flag) {
  epoch_flags flags(1);
  std::jthread raiser([&] {
    std::this_thread::sleep_for(30ms);
    flags.raise(0, 1);
  });
  EXPECT_TRUE(flags.wait(0, 1, soon(10s)));
  EXPECT_EQ(flags.seen(0), 1U);
}

TEST(done_bitmask, exactly_one_task_finishes_each_slice_call_after_call) {
  // Slices of one task, one full word, one partial word, and several words (the last partial).
  const std::vector<std::int64_t> tasks{1, 64, 5, 200};
  // In order on one thread: only a slice's last task finishes it, however many words the slice has,
  // twice (the finishing task cleared the slice), with atomic marks and with the plain ones.
  for (const auto how : {tasks_run::concurrently, tasks_run::on_one_thread}) {
    done_bitmask in_turn(tasks, how);
    for (int call = 0; call < 2; ++call)
      for (std::size_t s = 0; s < tasks.size(); ++s)
        for (std::int64_t task = 0; task < tasks[s]; ++task)
          EXPECT_EQ(in_turn.complete(s, task), task + 1 == tasks[s])
              << "call " << call << ", slice of " << tasks[s] << " tasks, task " << task;
  }
  done_bitmask done(tasks);
  // Then racing: workers finish the tasks of every call in any order.
  constexpr int workers = 4, calls = 50;
  std::vector<std::atomic<int>> finished(tasks.size() * calls);
  std::barrier between_calls(workers);
  {
    std::vector<std::jthread> team;
    for (int w = 0; w < workers; ++w)
      team.emplace_back([&, w] {
        for (int call = 0; call < calls; ++call) {
          // Worker w takes tasks w, w + 4, …, odd workers from the top down, so words fill in any order.
          for (std::size_t s = 0; s < tasks.size(); ++s) {
            std::vector<std::int64_t> mine;
            for (std::int64_t task = w; task < tasks[s]; task += workers) mine.push_back(task);
            if (w % 2) std::reverse(mine.begin(), mine.end());
            for (const auto task : mine)
              if (done.complete(s, task)) finished[static_cast<std::size_t>(call) * tasks.size() + s].fetch_add(1);
          }
          // Every task of this call is done before any of the next begins (as between two calls of an operator).
          between_calls.arrive_and_wait();
        }
      });
  }
  for (int call = 0; call < calls; ++call)
    for (std::size_t s = 0; s < tasks.size(); ++s)
      EXPECT_EQ(finished[static_cast<std::size_t>(call) * tasks.size() + s].load(), 1)
          << "call " << call << ", slice of " << tasks[s] << " tasks";
}

TEST(fused_embedding, a_timed_out_wait_names_the_slice_the_peer_and_the_flag) {
  // One table, on rank 1: rank 0 only receives. Rank 1 never calls, so rank 0's wait times out.
  const fused::embedding_shape shape{1, 4, 6};
  try {
    threads::run(2, [&](threads::communicator& comm) {
      fused::embedding_options options;
      options.timeout = 50ms;
      fused::embedding_all_to_all op(comm, shape, options);
      if (comm.rank() == 1) return;
      (void)op.fused({}, {});
    });
    ADD_FAILURE() << "the wait did not time out";
  } catch (const peer_error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("[rank 0] embedding_all_to_all: timed out waiting for slice 0 of table 0 from rank 1: "
                           "flag 1 holds epoch 0, this call is epoch 1"),
              std::string::npos)
        << message;
  }
}

const sim::link_model nic{10e9, 1e-6, "nic"};

TEST(message_queue, messages_on_one_link_queue_and_pay_their_overhead) {
  const auto net = sim::topology::nodes(2, 1, nic, nic, 1);
  const sim::message two[] = {{0, 1, 1e4, 0}, {0, 1, 1e4, 0}};
  const auto arrival = sim::deliver(net, two, 0.5e-6);
  EXPECT_DOUBLE_EQ(arrival[0], 0.5e-6 + 1e-6 + 1e-6);
  EXPECT_DOUBLE_EQ(arrival[1], 2 * (0.5e-6 + 1e-6) + 1e-6) << "the second waits for the first";
}

TEST(message_queue, a_sender_does_not_stall_behind_a_busy_receiver) {
  const auto net = sim::topology::nodes(3, 1, nic, nic, 1);
  // GPU 2's receiving NIC is busy with GPU 0's 10 µs message; GPU 1 sends it 1 µs, then GPU 0 1 µs.
  const sim::message three[] = {{0, 2, 1e5, 0}, {1, 2, 1e4, 0}, {1, 0, 1e4, 1e-9}};
  const auto arrival = sim::deliver(net, three, 0);
  EXPECT_DOUBLE_EQ(arrival[0], 10e-6 + 1e-6);
  EXPECT_DOUBLE_EQ(arrival[1], 11e-6 + 1e-6) << "queued behind the first at GPU 2";
  EXPECT_DOUBLE_EQ(arrival[2], 2e-6 + 1e-6) << "GPU 1's NIC sent it once the second had left, to a free receiver";
}

// On a ring of 5, GPU 0's second message to GPU 2 waits 1 ms on the link 0 -> 1 behind its first (to
// GPU 1), so the link 1 -> 2 carries it from 1 ms on; GPU 1's message to GPU 2, issued with them, takes
// that link while it is idle before, instead of queueing behind a message that had not reached it.
TEST(message_queue, a_link_idle_while_a_message_waits_upstream_carries_another_meanwhile) {
  const auto net = sim::topology::ring(5, {1e9, 0, "link"});
  const sim::message three[] = {{0, 1, 1e6, 0}, {0, 2, 1e6, 0}, {1, 2, 1e6, 0}};
  const auto arrival = sim::deliver(net, three, 0);
  EXPECT_DOUBLE_EQ(arrival[0], 1e-3);
  EXPECT_DOUBLE_EQ(arrival[1], 2e-3) << "behind the first on the link 0 -> 1";
  EXPECT_DOUBLE_EQ(arrival[2], 1e-3) << "on the link 1 -> 2 before the second reached it";
}

TEST(persistent_kernel, workgroups_share_the_device_and_a_fence_orders_a_signal_after_its_puts) {
  const sim::device_model gpu{1e12, 1e12, 0};
  const sim::gpu_initiated_model model{4, 0};
  sim::persistent_kernel kernel(0, gpu, model, 4, 0.0);
  for (int t = 0; t < 8; ++t) kernel.run_task({0, 1e6});  // 4 µs each at a quarter of the device
  for (int w = 0; w < 4; ++w) EXPECT_DOUBLE_EQ(kernel.clock(w), 8e-6);
  const auto net = sim::topology::nodes(3, 1, nic, nic, 1);
  kernel.put(0, 2, 1e6);  // 100 µs to GPU 2
  kernel.fence(0);
  kernel.signal(0, 1, 5);  // to GPU 1: alone it would take ~1 µs
  const auto arrivals = sim::deliver_all(net, kernel.messages(), 0);
  EXPECT_GE(arrivals[1], arrivals[0]) << "the signal overtook the put it was fenced behind";
  sim::persistent_kernel receiver(1, gpu, model, 4, 0.0);
  EXPECT_DOUBLE_EQ(receiver.finish(kernel.messages(), arrivals), arrivals[1]) << "workgroup 5 % 4 waits for flag 5";
}

TEST(persistent_kernel, a_workgroup_it_does_not_have_is_an_error_naming_it) {
  const sim::persistent_kernel kernel(2, sim::device_model{1e12, 1e12, 0}, sim::gpu_initiated_model{4, 0}, 4, 0.0);
  EXPECT_EQ(message_of<argument_error>([&] { (void)kernel.clock(4); }),
            "[rank 2] sim::persistent_kernel::clock: workgroup 4 is out of range: there are 4, numbered from 0");
}

TEST(persistent_kernel, the_next_kernel_starts_a_launch_after_the_last_workgroup_of_this_one) {
  const sim::device_model gpu{1e12, 1e12, 0};
  const sim::gpu_initiated_model model{4, 0};
  sim::persistent_kernel kernel(0, gpu, model, 4, 0.0);
  for (int t = 0; t < 5; ++t) kernel.run_task({0, 1e6});  // 4 µs each: one workgroup runs two
  EXPECT_DOUBLE_EQ(kernel.clock(0), 8e-6);
  kernel.relaunch(3e-6);
  for (int w = 0; w < 4; ++w) EXPECT_DOUBLE_EQ(kernel.clock(w), 11e-6) << w;
  for (int t = 0; t < 4; ++t) kernel.run_task({0, 1e6});
  for (int w = 0; w < 4; ++w) EXPECT_DOUBLE_EQ(kernel.clock(w), 15e-6) << w;
}

// Bags of `length` lookups of row 1 for every row of a global batch.
struct uniform_bags {
  std::vector<std::int64_t> offsets, indices;
  uniform_bags(std::int64_t batch, std::int64_t length) : indices(static_cast<std::size_t>(batch * length), 1) {
    for (std::int64_t b = 0; b <= batch; ++b) offsets.push_back(b * length);
  }
  // `tables` times these bags, pointing into this object.
  [[nodiscard]] std::vector<fused::embedding_bags> of(std::size_t tables) const {
    return std::vector<fused::embedding_bags>(tables, fused::embedding_bags{offsets, indices});
  }
};

// Runs `body(comm, fused, baseline)` on P simulated MI210s in nodes of two, where fused() and baseline()
// each run one path; then checks each rank's modelled time of the fused path, and the slowest rank's of
// the baseline, against `predicted`, and that the timeline has `tracks`.
template <class Body>
void expect_predicted_times(int P, const fused::embedding_times& predicted, std::initializer_list<const char*> tracks,
                            Body&& body, int gpus_per_node = 2) {
  auto machine = sim::presets::mi210_nodes(P, gpus_per_node);
  machine.record_timeline = true;
  std::vector<double> fused_time(static_cast<std::size_t>(P)), baseline_time(static_cast<std::size_t>(P));
  const auto report = sim_gpu::run(P, machine, [&](sim_gpu::communicator& comm) {
    const auto timed = [&](std::vector<double>& into) {
      return [&comm, &into](auto&& run) {
        comm.barrier();
        const double start = comm.now();
        run();
        into[static_cast<std::size_t>(comm.rank())] = comm.now() - start;
      };
    };
    body(comm, timed(fused_time), timed(baseline_time));
  });
  for (int r = 0; r < P; ++r)
    EXPECT_NEAR(fused_time[static_cast<std::size_t>(r)], predicted.fused_by_rank[static_cast<std::size_t>(r)], 1e-12)
        << r;
  EXPECT_NEAR(*std::max_element(baseline_time.begin(), baseline_time.end()), predicted.baseline, 1e-12);
  const auto json = report.timeline->chrome_trace_json();
  for (const char* track : tracks) EXPECT_NE(json.find(track), std::string::npos) << track;
}

// Runs the forward's fused path and baseline of `shape` on P simulated MI210s in nodes of
// `gpus_per_node` with `options`, and checks their times against the cost model's for `plan`.
void expect_forward_takes_the_predicted_time(int P, int gpus_per_node, const fused::embedding_shape& shape,
                                             const fused::embedding_options& options, const fused::embedding_plan& plan,
                                             std::int64_t bag_length, std::initializer_list<const char*> tracks) {
  const auto predicted =
      fused::predict(plan, sim::presets::mi210_nodes(P, gpus_per_node), options.gpu_initiated, bag_length);
  expect_predicted_times(
      P, predicted, tracks,
      [&](sim_gpu::communicator& comm, auto fused_timed, auto baseline_timed) {
        fused::embedding_all_to_all op(comm, shape, options);
        EXPECT_EQ(op.plan().order(), plan.order());
        std::vector<shardwise::testing::embedding_matrix> tables;
        std::vector<std::span<const float>> table_spans;
        for (int t = 0; t < op.plan().tables_of(comm.rank()); ++t)
          tables.push_back(shardwise::testing::embedding_table(t, shape.dimension));
        for (const auto& t : tables) table_spans.emplace_back(t.data(), static_cast<std::size_t>(t.size()));
        const uniform_bags lookups(shape.global_batch, bag_length);
        const auto bags = lookups.of(tables.size());
        fused_timed([&] { (void)op.fused(table_spans, bags); });
        baseline_timed([&] { (void)op.baseline(table_spans, bags); });
      },
      gpus_per_node);
}

TEST(fused_embedding, on_sim_gpu_the_run_takes_the_time_the_cost_model_predicts) {
  constexpr int P = 4;
  const fused::embedding_shape shape{6, 16, 40};
  fused::embedding_options options;
  options.slice_rows = 4;
  // The order the operator takes on sim_gpu by default (checked in the run).
  const fused::embedding_plan plan(shape, P, options.slice_rows, fused::slice_order::communication_aware);
  expect_forward_takes_the_predicted_time(
      P, 2, shape, options, plan, 3,
      {"workgroup 0", "fused embedding + all-to-all", "GPU-initiated messages", "remote slices"});
}

// The paper's intra-node kernel: one per table, launched in turn, storing into the peers. It keeps the
// baseline's pooling kernels (a launch each, under-filled at small batches) and can at best hide the
// all-to-all and the unpack behind them; the persistent kernel saves those too.
TEST(fused_embedding, a_kernel_per_table_runs_the_tables_in_turn_and_takes_the_time_the_cost_model_predicts) {
  constexpr int P = 4;
  const fused::embedding_shape shape{8, 16, 64};
  constexpr std::int64_t bag_length = 3;
  fused::embedding_options options;
  options.slice_rows = 4;
  options.gpu_initiated.kernel_per_table = true;
  // A kernel per table takes each table's slices together (checked in the run).
  const fused::embedding_plan plan(shape, P, options.slice_rows, fused::slice_order::table_by_table);
  expect_forward_takes_the_predicted_time(P, P, shape, options, plan, bag_length,
                                          {"fused embedding + all-to-all", "remote slices", "local slices"});

  const auto machine = sim::presets::mi210_nodes(P, P);
  const auto per_table = fused::predict(plan, machine, options.gpu_initiated, bag_length);
  const auto persistent = fused::predict(plan, machine, sim::gpu_initiated_model{}, bag_length);
  // Each rank's 2 tables: a launch, then 64 bags on 64 of the 1040 workgroups, one after the other.
  const double table =
      machine.device.launch_latency +
      fused::task_duration(machine.device, options.gpu_initiated, fused::pooling_work(bag_length, shape.dimension));
  for (int r = 0; r < P; ++r) {
    EXPECT_GE(per_table.fused_by_rank[static_cast<std::size_t>(r)], 2 * table) << r;
    EXPECT_GT(per_table.fused_by_rank[static_cast<std::size_t>(r)],
              persistent.fused_by_rank[static_cast<std::size_t>(r)] + machine.device.launch_latency)
        << r;
  }
  EXPECT_LT(per_table.fused, per_table.baseline);
}

TEST(fused_embedding, on_sim_gpu_the_backward_takes_the_time_the_cost_model_predicts) {
  constexpr int P = 4;
  const fused::embedding_shape shape{6, 16, 40, {16, 8, 16, 32, 16, 8}};
  constexpr std::int64_t bag_length = 3;
  fused::embedding_options options;
  options.slice_rows = 4;
  const fused::embedding_plan plan(shape, P, options.slice_rows, fused::slice_order::communication_aware);
  const auto predicted =
      fused::predict_backward(plan, sim::presets::mi210_nodes(P, 2), options.gpu_initiated, bag_length);
  EXPECT_LT(predicted.fused, predicted.baseline) << "the slices' puts overlap the scatter-add of the rank's own rows";
  expect_predicted_times(
      P, predicted, {"fused all-to-all + scatter-add", "local slices", "scatter-add, table 3"},
      [&](sim_gpu::communicator& comm, auto fused_timed, auto baseline_timed) {
        fused::embedding_all_to_all op(comm, shape, options);
        std::vector<nn::sparse_rows<float>> gradients;
        std::vector<nn::sparse_rows<float>*> pointers;
        for (int t = op.plan().first_table(comm.rank()); t < op.plan().first_table(comm.rank() + 1); ++t)
          gradients.emplace_back(3, op.plan().dimension_of(t));
        for (auto& g : gradients) pointers.push_back(&g);
        const uniform_bags lookups(shape.global_batch, bag_length);
        const auto bags = lookups.of(gradients.size());
        const std::vector<float> output_gradient(static_cast<std::size_t>(op.plan().output_floats(comm.rank())), 0.5F);
        const std::span<nn::sparse_rows<float>* const> into(pointers);
        fused_timed([&] { op.fused_backward(std::span<const float>(output_gradient), bags, into); });
        baseline_timed([&] { op.baseline_backward(std::span<const float>(output_gradient), bags, into); });
      });
}

TEST(fused_embedding, falls_back_to_the_baseline_where_the_model_predicts_no_gain) {
  constexpr int P = 2;
  auto fuses = [](fused::embedding_shape shape, std::int64_t slice_rows) {
    bool result = false;
    sim_gpu::run(P, sim::presets::mi210_nodes(P, 1), [&](sim_gpu::communicator& comm) {
      fused::embedding_options options;
      options.slice_rows = slice_rows;
      fused::embedding_all_to_all op(comm, shape, options);
      if (comm.rank() == 0) result = op.fuses();
    });
    return result;
  };
  EXPECT_FALSE(fuses({2, 4, 4096}, 1)) << "16-byte slices: the NIC's message rate costs more than it hides";
  EXPECT_TRUE(fuses({64, 256, 1024}, 32));
}

TEST(fused_embedding, automatic_slice_rows_take_the_size_the_model_finds_fastest) {
  constexpr int P = 2;
  const fused::embedding_shape shape{32, 256, 512};  // 16 tables per GPU, as in the paper's grid
  const auto machine = sim::presets::mi210_nodes(P, 1);
  fused::embedding_options options;
  options.slice_rows = fused::automatic_slice_rows;
  std::int64_t chosen = 0;
  sim_gpu::run(P, machine, [&](sim_gpu::communicator& comm) {
    fused::embedding_all_to_all op(comm, shape, options);
    if (comm.rank() == 0) chosen = op.plan().slice_rows();
  });
  auto fused_time = [&](std::int64_t rows) {
    return fused::predict(fused::embedding_plan(shape, P, rows, fused::slice_order::communication_aware), machine,
                          options.gpu_initiated, 1)
        .fused;
  };
  for (std::int64_t rows = 16; rows <= 1024; rows *= 2)
    EXPECT_LE(fused_time(chosen), fused_time(rows)) << "chose " << chosen << " rows; " << rows << " is faster";
  EXPECT_NE(chosen, 32) << "here the paper's 32 pays the NIC's message cost too often";
  // Without a machine model (threads, MPI): where every slice is stored in place, one slice per table
  // and destination (its 96 rows of a batch of 192); where slices travel as messages, the paper's 32.
  shardwise::threads::run(P, [&](shardwise::threads::communicator& comm) {
    const fused::embedding_all_to_all stored(comm, {4, 8, 192}, options);
    EXPECT_EQ(stored.plan().slice_rows(), 96);
    EXPECT_EQ(stored.plan().slices_to(comm.rank()), 1);
    fused::embedding_options as_messages = options;
    as_messages.share_memory = false;
    const fused::embedding_all_to_all sent(comm, {4, 8, 192}, as_messages);
    EXPECT_EQ(sent.plan().slice_rows(), 32);
  });
}

}  // namespace
