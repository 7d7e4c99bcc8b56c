// What the sim_gpu backend adds to the threads backend: virtual time. Kernels, streams and events,
// collectives timed by the cost model, messages, the timeline, and the cost-only mode giving the same
// times without data. (Its data results are tested by the shared collectives test, collectives.sim_gpu.)
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "shardwise/sim/cost_only.hpp"
#include "shardwise/sim/presets.hpp"
#include "shardwise/sim/sim_gpu.hpp"
#include "support/messages.hpp"

namespace {

using namespace shardwise;
using shardwise::testing::message_of;

const sim::device_model gpu{10e12, 1e12, 5e-6};
const sim::link_model link{50e9, 2e-6, "link"};

sim::machine fully_connected(int ranks) { return {gpu, sim::topology::fully_connected(ranks, link)}; }

double duration_of(const sim::machine& m, int ranks, sim::collective_shape shape) {
  sim::collective_cost costs(m);
  std::vector<int> devices;
  for (int r = 0; r < ranks; ++r) devices.push_back(r);
  return costs.duration(costs.group_id(devices), devices, shape);
}

TEST(sim_gpu, a_collective_starts_when_the_last_rank_arrives) {
  constexpr int P = 4;
  const auto m = fully_connected(P);
  const double kernel = gpu.duration({1e9 * 10, 0});  // rank r runs r+1 of these first
  const double all_reduce = duration_of(m, P, {sim::collective::all_reduce, 4096 * sizeof(float), 0});
  const auto report = sim_gpu::run(P, m, [&](sim_gpu::communicator& comm) {
    for (int k = 0; k <= comm.rank(); ++k) comm.stream().launch({1e10, 0});
    EXPECT_DOUBLE_EQ(comm.now(), 0.0) << "launching does not make the host wait";
    std::vector<float> data(4096, 1.0F);
    comm.all_reduce(data);
    EXPECT_EQ(data[0], static_cast<float>(P));
    EXPECT_NEAR(comm.now(), P * kernel + all_reduce, 1e-12) << "rank " << comm.rank();
  });
  for (const double t : report.finish_times) EXPECT_NEAR(t, P * kernel + all_reduce, 1e-12);
}

TEST(sim_gpu, streams_overlap_and_events_order_them) {
  const auto m = fully_connected(2);
  const double kernel = gpu.duration({0, 1e9});  // memory-bound, 1 ms + launch
  const double gather = duration_of(m, 2, {sim::collective::all_gather, 1 << 20, 0});
  sim_gpu::run(2, m, [&](sim_gpu::communicator& comm) {
    auto& compute = comm.device().default_stream();
    auto& network = comm.device().create_stream("communication");
    comm.use_stream(network);
    std::vector<std::byte> block(1 << 20), all(2 << 20);
    compute.launch({0, 1e9});
    comm.all_gather(block, all);  // on the other stream: alongside the kernel
    EXPECT_NEAR(comm.now(), gather, 1e-12);
    compute.synchronize();
    EXPECT_NEAR(comm.now(), std::max(kernel, gather), 1e-12);
    // An event makes the communication stream wait for a kernel.
    compute.launch({0, 1e9});
    network.wait(compute.record());
    comm.all_gather(block, all);
    EXPECT_NEAR(comm.now(), 2 * kernel + gather, 1e-12);
  });
}

TEST(sim_gpu, a_started_collective_moves_the_host_clock_on_wait) {
  const auto m = fully_connected(3);
  const double exchange = duration_of(m, 3, {sim::collective::all_to_all, 1000 * sizeof(double), 0});
  sim_gpu::run(3, m, [&](sim_gpu::communicator& comm) {
    std::vector<double> in(3000, comm.rank()), out(3000);
    auto pending = comm.iall_to_all(in, out);
    EXPECT_DOUBLE_EQ(comm.now(), 0.0);
    // A kernel behind it on the same stream starts after it.
    const double kernel_end = comm.stream().launch({0, 1e6}, [&] { EXPECT_EQ(out[1000], 1.0); });
    EXPECT_NEAR(kernel_end, exchange + gpu.duration({0, 1e6}), 1e-12);
    pending.wait();
    EXPECT_NEAR(comm.now(), exchange, 1e-12);
  });
}

TEST(sim_gpu, a_message_takes_latency_plus_bytes_over_bandwidth) {
  sim_gpu::run(2, fully_connected(2), [&](sim_gpu::communicator& comm) {
    std::vector<float> message(1 << 18);
    const double travel = link.latency + static_cast<double>(message.size() * sizeof(float)) / link.bandwidth;
    if (comm.rank() == 0) {
      comm.stream().launch({0, 1e9});  // the message leaves once the stream is free
      comm.send(message, 1);
      EXPECT_NEAR(comm.now(), gpu.duration({0, 1e9}) + travel, 1e-12);
    } else {
      comm.recv(message, 0);
      EXPECT_NEAR(comm.now(), gpu.duration({0, 1e9}) + travel, 1e-12);
    }
  });
}

// An operation's kernel (the local GEMMs of ops/) runs on the compute stream, beside the communicator's
// own stream, and what the communicator sends afterwards leaves when the kernel ends.
TEST(sim_gpu, an_operations_kernel_holds_the_messages_sent_after_it) {
  sim_gpu::run(2, fully_connected(2), [&](sim_gpu::communicator& comm) {
    auto& compute = comm.device().default_stream();
    comm.use_stream(comm.device().create_stream("communication"));
    std::vector<float> message(1 << 18);
    const double travel = link.latency + static_cast<double>(message.size() * sizeof(float)) / link.bandwidth;
    const double kernel = gpu.duration({1e10, 0});
    bool computed = false;
    EXPECT_NEAR(comm.launch({1e10, 0}, [&] { computed = true; }, "GEMM"), kernel, 1e-12);
    EXPECT_TRUE(computed) << "the kernel's result is there at once";
    EXPECT_NEAR(compute.ready(), kernel, 1e-12) << "on the compute stream";
    EXPECT_DOUBLE_EQ(comm.now(), 0.0) << "launching does not make the host wait";
    if (comm.rank() == 0) {
      comm.send(message, 1);
    } else {
      comm.recv(message, 0);
    }
    EXPECT_NEAR(comm.now(), kernel + travel, 1e-12) << "rank " << comm.rank();
  });
}

// Every communicator's collectives and messages wait for an operation's kernel launched before them,
// whichever communicator launched it (the copy of a reduction launched over the world, then the
// all-reduce along a mesh axis).
TEST(sim_gpu, an_operations_kernel_holds_every_communicators_collectives_and_messages) {
  const auto m = fully_connected(2);
  sim_gpu::run(2, m, [&](sim_gpu::communicator& world) {
    world.use_stream(world.device().create_stream("communication"));
    auto axis = world.split(0, world.rank());
    EXPECT_NE(&axis.stream(), &world.stream()) << "split off a stream of its own, the axis gets one";
    const double kernel = gpu.duration({1e10, 0});
    std::vector<float> data(1 << 18, 1.0F);
    const double bytes = static_cast<double>(data.size() * sizeof(float));

    double before = world.synchronized_now();
    (void)world.launch({1e10, 0}, [] {}, "copy");
    axis.all_reduce(data);
    EXPECT_NEAR(world.now(), before + kernel + duration_of(m, 2, {sim::collective::all_reduce, bytes, 0}), 1e-12);

    before = world.synchronized_now();
    (void)world.launch({1e10, 0}, [] {}, "copy");
    if (axis.rank() == 0) {
      axis.send(data, 1);
    } else {
      axis.recv(data, 0);
    }
    EXPECT_NEAR(world.now(), before + kernel + link.latency + bytes / link.bandwidth, 1e-12) << "rank " << world.rank();
  });
}

// Each message's transfer is drawn on the links of its route, once, by its sender.
TEST(sim_gpu, a_message_is_drawn_on_its_links) {
  auto m = fully_connected(2);
  m.record_timeline = true;
  const auto report = sim_gpu::run(2, m, [](sim_gpu::communicator& comm) {
    std::vector<float> message(1024);
    if (comm.rank() == 0) {
      comm.send(message, 1);
    } else {
      comm.recv(message, 0);
    }
  });
  ASSERT_TRUE(report.timeline);
  EXPECT_EQ(report.timeline->size(), 1U);
  EXPECT_NE(report.timeline->chrome_trace_json().find("GPU 0 → GPU 1"), std::string::npos);
}

TEST(sim_gpu, split_communicators_are_timed_on_their_own_devices) {
  const auto m = sim::presets::mi210_nodes(8, 4);
  sim_gpu::run(8, m, [&](sim_gpu::communicator& world) {
    const double split_cost = duration_of(m, 8, {sim::collective::all_gather, 2 * sizeof(int), 0});
    auto node = world.split(world.rank() / 4, 0);
    EXPECT_NEAR(world.now(), split_cost, 1e-12);
    std::vector<float> data(1 << 20, 1.0F);
    node.all_reduce(data);
    EXPECT_EQ(data[5], 4.0F);
    // Inside a node: the xGMI links only, so both nodes take the same time.
    sim::collective_cost costs(m);
    std::vector<int> members;
    for (int r = 0; r < 4; ++r) members.push_back(world.rank() / 4 * 4 + r);
    const double expected =
        costs.duration(costs.group_id(members), members, {sim::collective::all_reduce, 4.0 * (1 << 20), 0});
    EXPECT_NEAR(world.now(), split_cost + expected, 1e-12);
  });
}

TEST(sim_gpu, the_machine_must_have_as_many_gpus_as_ranks) {
  EXPECT_THROW(sim_gpu::run(3, fully_connected(4), [](sim_gpu::communicator&) {}), argument_error);
}

TEST(sim_gpu, a_timeline_that_cannot_be_written_is_an_error_saying_why) {
  const sim::timeline trace;
  EXPECT_EQ(
      message_of<argument_error>([&] { trace.write_chrome_trace("/no/such/folder/trace.json"); }),
      "[no rank] timeline::write_chrome_trace: cannot write /no/such/folder/trace.json: No such file or directory");
}

TEST(sim_gpu, a_stream_the_device_does_not_have_is_an_error_naming_it) {
  sim_gpu::run(2, fully_connected(2), [](sim_gpu::communicator& comm) {
    (void)comm.device().create_stream("communication");
    EXPECT_EQ(message_of<argument_error>([&] { (void)comm.device().stream_at(2); }),
              "[rank " + std::to_string(comm.world_rank()) +
                  "] sim::device::stream_at: stream 2 is out of range: there are 2, numbered from 0");
  });
}

// The timeline as Chrome trace JSON, written where the test is told (a CTest fixture then parses it
// with Python's json module); here: it names every stream and link track it uses.
TEST(sim_gpu, writes_a_timeline_with_stream_and_link_tracks) {
  auto m = sim::presets::mi210_nodes(4, 2);
  m.record_timeline = true;
  const auto report = sim_gpu::run(4, m, [](sim_gpu::communicator& comm) {
    auto& side = comm.device().create_stream("side");
    side.launch({1e9, 1e6}, [] {}, "pooling");
    std::vector<float> data(1 << 16, 1.0F), out(data.size());
    comm.all_to_all(data, out);
    comm.all_reduce(data);
  });
  ASSERT_TRUE(report.timeline);
  const std::string json = report.timeline->chrome_trace_json();
  for (const char* expected : {"\"GPU 3\"", "\"side\"", "\"stream 0\"", "\"network\"", "(xGMI)", "(InfiniBand)",
                               "\"pooling\"", "\"all_to_all\"", "\"ph\":\"X\""})
    EXPECT_NE(json.find(expected), std::string::npos) << expected << " missing from the trace";
  if (const char* path = std::getenv("SHARDWISE_TRACE_PATH")) report.timeline->write_chrome_trace(path);
}

// One program, run with data on threads and cost-only without: the same virtual times.
template <class Comm>
void program(Comm& world, auto&& launch, auto&& all_reduce, auto&& all_gather, auto&& split) {
  for (int step = 0; step < 3; ++step) {
    launch(world, step);
    all_reduce(world, std::size_t{1} << (10 + 4 * step));
    auto rows = split(world);
    all_gather(rows, std::size_t{1000});
  }
}

TEST(cost_only, gives_the_times_of_the_run_with_data) {
  constexpr int P = 8;
  const auto m = sim::presets::v100_nodes(P, 4);
  auto work_of = [](int rank, int step) { return shardwise::work{1e9 * (rank + 1) * (step + 1), 1e6}; };
  const auto with_data = sim_gpu::run(P, m, [&](sim_gpu::communicator& world) {
    program(
        world, [&](sim_gpu::communicator& c, int step) { c.stream().launch(work_of(c.world_rank(), step)); },
        [](sim_gpu::communicator& c, std::size_t n) {
          std::vector<float> v(n, 1.0F);
          c.all_reduce(v);
        },
        [](sim_gpu::communicator& c, std::size_t b) {
          std::vector<double> in(b), out(b * static_cast<std::size_t>(c.size()));
          c.all_gather(in, out);
        },
        [](sim_gpu::communicator& c) { return c.split(c.rank() % 2, -c.rank()); });
  });
  const auto cost_only = sim::cost_only::run(P, m, [&](sim::cost_only::communicator& world) {
    program(
        world,
        [&](sim::cost_only::communicator& c, int step) { c.launch([&](int rank) { return work_of(rank, step); }); },
        [](sim::cost_only::communicator& c, std::size_t n) { c.all_reduce<float>(n); },
        [](sim::cost_only::communicator& c, std::size_t b) { c.all_gather<double>(b); },
        [](sim::cost_only::communicator& c) { return c.split([](int r) { return r % 2; }, [](int r) { return -r; }); });
  });
  ASSERT_EQ(with_data.finish_times.size(), cost_only.finish_times.size());
  for (std::size_t r = 0; r < with_data.finish_times.size(); ++r) {
    EXPECT_GT(cost_only.finish_times[r], 0.0);
    EXPECT_DOUBLE_EQ(with_data.finish_times[r], cost_only.finish_times[r]) << "rank " << r;
  }
}

TEST(cost_only, a_rank_or_group_the_run_does_not_have_is_an_error_naming_it) {
  sim::cost_only::run(4, fully_connected(4), [](sim::cost_only::communicator& world) {
    EXPECT_EQ(message_of<argument_error>([&] { (void)world.now(4); }),
              "[no rank] sim::cost_only::communicator::now: rank 4 is out of range: there are 4, numbered from 0");
    EXPECT_EQ(message_of<argument_error>([&] { (void)world.members(1); }),
              "[no rank] sim::cost_only::communicator::members: group 1 is out of range: there are 1, numbered from 0");
  });
}

// Two collectives of different communicators started together on streams of their own, on groups
// whose nodes share one NIC: the one waited for second is played beside the first and takes longer
// than alone; cost-only, which prices each when it starts, gives the same times, since the program
// waits in that order.
TEST(cost_only, prices_collectives_beside_each_other_as_the_run_with_data_does) {
  constexpr int P = 8;
  const auto m = sim::presets::v100_nodes(P, 4);
  constexpr std::size_t gathered_block = 1 << 18, reduced = 1 << 20;
  const auto with_data = sim_gpu::run(P, m, [&](sim_gpu::communicator& world) {
    auto columns = world.split(world.rank() % 4, world.rank());  // one GPU of each node
    const double start = world.now();
    std::vector<float> block(gathered_block, 1.0F), gathered(gathered_block * 2), sums(reduced, 1.0F);
    world.use_stream(world.device().create_stream("side"));
    auto gather = columns.iall_gather(block, gathered);
    auto sum = world.iall_reduce(sums);
    gather.wait();
    sum.wait();
    EXPECT_EQ(sums[7], 8.0F);
    sim::collective_cost alone(m);
    std::vector<int> everyone(P);
    for (int r = 0; r < P; ++r) everyone[static_cast<std::size_t>(r)] = r;
    const double all_reduce_alone =
        alone.duration(alone.group_id(everyone), everyone, {sim::collective::all_reduce, 4.0 * reduced, 0});
    EXPECT_GT(world.now(), start + all_reduce_alone * 1.05) << "the all-reduce shared no link with the all-gather";
  });
  const auto cost_only = sim::cost_only::run(P, m, [&](sim::cost_only::communicator& world) {
    auto columns = world.split([](int r) { return r % 4; }, [](int r) { return r; });
    world.use_stream(1);
    const auto gather = columns.iall_gather<float>(gathered_block);
    const auto sum = world.iall_reduce<float>(reduced);
    world.wait(gather);
    world.wait(sum);
  });
  for (std::size_t r = 0; r < P; ++r)
    EXPECT_DOUBLE_EQ(with_data.finish_times[r], cost_only.finish_times[r]) << "rank " << r;
}

// 1024 simulated GPUs, 10⁴ modelled operations (kernels and collectives over the world and over
// groups). Prints the wall time; asserts only that the model ran (tests never assert on time).
TEST(cost_only, scales_to_1024_ranks_and_ten_thousand_operations) {
  constexpr int P = 1024;
  const auto started = std::chrono::steady_clock::now();
  std::int64_t operations = 0;
  const auto report = sim::cost_only::run(P, sim::presets::mi210_nodes(P, 4), [&](sim::cost_only::communicator& world) {
    auto nodes = world.split([](int r) { return r / 4; });
    auto columns = world.split([](int r) { return r % 32; });
    for (int i = 0; operations < 10000; ++i) {
      world.launch({2e9, 4e7});
      nodes.all_reduce<float>(std::size_t{1} << (16 + i % 4));
      columns.all_gather<float>(std::size_t{4096});
      world.launch([&](int r) { return shardwise::work{1e9 * (1 + r % 3), 1e6}; });
      columns.reduce_scatter<float>(std::size_t{4096});
      world.all_reduce<float>(std::size_t{256});
      if (i % 100 == 0) world.all_to_all<float>(std::size_t{64});
      operations += i % 100 == 0 ? 7 : 6;
    }
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("cost-only: %d ranks, %lld operations, %.3f s of wall time for %.6f s of virtual time\n", P,
              static_cast<long long>(operations), seconds, report.makespan());
  EXPECT_GT(report.makespan(), 0.0);
  RecordProperty("wall_seconds", std::to_string(seconds));
}

}  // namespace
