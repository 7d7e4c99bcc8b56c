// The models alone, no ranks: kernel durations, routes, link sharing, and every collective
// algorithm's modelled time against its α-β formula (sim/schedule.hpp) when no link is shared.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <queue>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "shardwise/sim/collective_cost.hpp"
#include "shardwise/sim/free_first.hpp"
#include "shardwise/sim/network.hpp"
#include "shardwise/sim/presets.hpp"
#include "support/messages.hpp"

namespace {

using namespace shardwise::sim;

constexpr double alpha = 3e-6;      // s per message
constexpr double bandwidth = 40e9;  // bytes/s
constexpr double beta = 1 / bandwidth;
const device_model gpu{20e12, 1.5e12, 4e-6};
const double gamma = 3 / gpu.memory_bandwidth;  // reduction: read two, write one

// A step that sends for `sending` seconds and reduces `reduced` bytes at `per_byte` seconds a byte:
// the data arrives in slices of 1 MiB (algorithm_choice::reduction_slice_bytes) and each is reduced
// while the next arrives, so the step ends one segment's reduction after its transfers, or one
// segment's transfer before its reductions end, whichever is later.
double with_reduction(double sending, double reduced, double per_byte = gamma) {
  const double segments = std::max(1.0, std::ceil(reduced / (1 << 20)));
  return std::max(sending + reduced * per_byte / segments, sending / segments + reduced * per_byte);
}

double log2_of(int p) { return std::log2(static_cast<double>(p)); }
int ceil_log2(int p) { return static_cast<int>(std::ceil(log2_of(p) - 1e-12)); }

machine fully_connected(int ranks, algorithm_choice choice = {}) {
  return {gpu, topology::fully_connected(ranks, {bandwidth, alpha, "test link"}), choice};
}

double modelled(const machine& m, int ranks, collective_shape shape) {
  collective_cost costs(m);
  std::vector<int> devices;
  for (int r = 0; r < ranks; ++r) devices.push_back(r);
  return costs.duration(costs.group_id(devices), devices, shape);
}

void expect_within_one_percent(double model, double formula, const std::string& what) {
  EXPECT_NEAR(model, formula, 0.01 * formula) << what << ": model " << model << " s, formula " << formula << " s";
}

TEST(device_model, kernel_time_is_launch_plus_the_slower_of_compute_and_memory) {
  EXPECT_DOUBLE_EQ(gpu.duration({20e12, 0}), 4e-6 + 1.0);   // compute-bound: one second of FLOPs
  EXPECT_DOUBLE_EQ(gpu.duration({1e6, 3e12}), 4e-6 + 2.0);  // memory-bound: two seconds of bytes
  EXPECT_DOUBLE_EQ(gpu.duration({}), 4e-6);                 // an empty kernel still launches
}

TEST(topology, routes_take_the_links_the_shape_says) {
  const link_model link{bandwidth, alpha, "l"};
  const auto ring = topology::ring(8, link);
  EXPECT_EQ(ring.route_between(1, 3).links.size(), 2U);  // clockwise, two hops
  EXPECT_EQ(ring.route_between(1, 7).links.size(), 2U);  // counter-clockwise is shorter
  EXPECT_DOUBLE_EQ(ring.route_between(1, 7).latency, 2 * alpha);
  EXPECT_NE(ring.route_between(1, 2).links, ring.route_between(2, 1).links);  // full duplex

  const auto torus = topology::torus_2d(4, 4, link);
  // (0,0) → (2,3): one hop backwards in columns (wrap-around), two in rows.
  EXPECT_EQ(torus.route_between(0, 11).links.size(), 3U);
  EXPECT_TRUE(torus.route_between(5, 5).links.empty());

  const auto nodes = topology::nodes(8, 4, link, {10e9, 5e-6, "ib"}, 1);
  EXPECT_EQ(nodes.route_between(0, 3).links.size(), 1U);
  EXPECT_DOUBLE_EQ(nodes.route_between(0, 3).latency, alpha);
  const auto across = nodes.route_between(1, 6);
  ASSERT_EQ(across.links.size(), 2U);  // up the NIC of node 0, down the NIC of node 1
  EXPECT_DOUBLE_EQ(across.latency, 5e-6);
  EXPECT_DOUBLE_EQ(nodes.bandwidth(across.links[0]), 10e9);
  EXPECT_EQ(across.links[0], nodes.route_between(2, 5).links[0]);  // one NIC per node: shared
  EXPECT_THROW((void)topology::nodes(6, 4, link, link, 1), shardwise::argument_error);
}

// Each factory's errors name it, the shape it was given and what it needs.
TEST(topology, a_shape_it_cannot_build_is_an_error_naming_the_factory) {
  using shardwise::testing::message_of;
  const link_model link{50e9, 2e-6, "link"};
  EXPECT_EQ(message_of<shardwise::argument_error>([&] { (void)topology::fully_connected(0, link); }),
            "[no rank] topology::fully_connected: needs at least one device, got 0");
  EXPECT_EQ(message_of<shardwise::argument_error>([&] { (void)topology::ring(-2, link); }),
            "[no rank] topology::ring: needs at least one device, got -2");
  EXPECT_EQ(message_of<shardwise::argument_error>([&] { (void)topology::nodes(0, 4, link, link, 1); }),
            "[no rank] topology::nodes: needs at least one device, got 0");
  EXPECT_EQ(message_of<shardwise::argument_error>([&] { (void)topology::switched_nodes(6, 4, link, link, 1); }),
            "[no rank] topology::switched_nodes: 6 GPUs do not fill nodes of 4");
  EXPECT_EQ(message_of<shardwise::argument_error>([&] { (void)topology::torus_2d(2, 0, link); }),
            "[no rank] topology::torus_2d: needs positive extents, got 2 x 0");
}

// Inside a switched node (NVSwitch) each GPU has one port each way: a transfer goes up its source's
// port and down its destination's, so one GPU's transfers share its up port, those to one GPU its
// down port, and two disjoint pairs share nothing. Between nodes it is as any node.
TEST(topology, a_switched_node_joins_each_gpu_to_the_switch_by_a_port) {
  const link_model port{bandwidth, alpha, "port"};
  const auto nodes = topology::switched_nodes(16, 8, port, {10e9, 5e-6, "ib"}, 8);
  EXPECT_TRUE(nodes.switched());
  EXPECT_FALSE(topology::nodes(16, 8, port, {10e9, 5e-6, "ib"}, 8).switched());
  const auto inside = nodes.route_between(0, 3);
  ASSERT_EQ(inside.links.size(), 2U);
  EXPECT_DOUBLE_EQ(inside.latency, alpha);
  for (const auto link : inside.links) EXPECT_DOUBLE_EQ(nodes.bandwidth(link), bandwidth);
  EXPECT_EQ(nodes.link_name(inside.links[0]), "GPU 0 → switch (port)");
  EXPECT_EQ(nodes.link_name(inside.links[1]), "switch → GPU 3 (port)");
  EXPECT_EQ(nodes.route_between(0, 5).links[0], inside.links[0]);
  EXPECT_EQ(nodes.route_between(6, 3).links[1], inside.links[1]);
  for (const auto link : nodes.route_between(1, 2).links)
    EXPECT_EQ(std::count(inside.links.begin(), inside.links.end(), link), 0);
  EXPECT_NE(nodes.route_between(3, 0).links, inside.links);  // full duplex
  const auto across = nodes.route_between(1, 9);
  ASSERT_EQ(across.links.size(), 2U);  // up GPU 1's NIC, down GPU 9's
  EXPECT_DOUBLE_EQ(across.latency, 5e-6);
  EXPECT_DOUBLE_EQ(nodes.bandwidth(across.links[0]), 10e9);
  for (const auto link : across.links) EXPECT_EQ(nodes.link_name(link).rfind("NIC", 0), 0U) << nodes.link_name(link);
  EXPECT_FALSE(nodes.disjoint_routes_can_meet());  // a port and a NIC for every GPU
}

// Devices on the chips of a torus (a TPU's two TensorCores): a chip's devices reach each other over
// a link of their own and leave the chip over its four torus links, which they share.
TEST(topology, the_devices_of_a_chip_share_its_torus_links) {
  const link_model ici{bandwidth, alpha, "ici"};
  const link_model between{2 * bandwidth, alpha / 2, "between cores"};
  const auto torus = topology::torus_2d(4, 4, ici, 2, between);
  EXPECT_EQ(torus.devices(), 32);
  EXPECT_EQ(torus.devices_per_chip(), 2);
  const auto inside = torus.route_between(0, 1);
  ASSERT_EQ(inside.links.size(), 1U);
  EXPECT_DOUBLE_EQ(inside.latency, between.latency);
  EXPECT_DOUBLE_EQ(torus.bandwidth(inside.links[0]), between.bandwidth);
  EXPECT_NE(inside.links, torus.route_between(1, 0).links);  // full duplex
  // Both cores of chip 0 reach chip 1 over chip 0's one +column link.
  ASSERT_EQ(torus.route_between(0, 2).links.size(), 1U);
  EXPECT_EQ(torus.route_between(0, 2).links, torus.route_between(1, 3).links);
  EXPECT_DOUBLE_EQ(torus.bandwidth(torus.route_between(0, 2).links[0]), ici.bandwidth);
  // Chip 0 at (0, 0) to chip 10 at (2, 2): two hops along the row, two down the column.
  EXPECT_EQ(torus.route_between(1, 21).links.size(), 4U);
  EXPECT_DOUBLE_EQ(torus.route_between(1, 21).latency, 4 * alpha);
  EXPECT_THROW((void)topology::torus_2d(4, 4, ici, 0, between), shardwise::argument_error);
}

TEST(network, a_transfer_alone_takes_latency_plus_bytes_over_bandwidth) {
  const auto net = topology::fully_connected(2, {bandwidth, alpha, "l"});
  const transfer t{0, 1, 1e6, 0.5};
  const auto timing = simulate(net, std::span(&t, 1));
  EXPECT_NEAR(timing.transfers[0].finish, 0.5 + alpha + 1e6 * beta, 1e-15);
}

// Transfers of a few bytes that start late in a run (a long program's small all-reduce, split over
// thousands of ranks) finish on time: their remaining bytes are below what the clock's rounding
// resolves, which once left the simulation waiting for them forever.
TEST(network, tiny_transfers_late_in_a_run_finish_on_time) {
  const auto net = topology::fully_connected(16, {bandwidth, alpha, "l"});
  std::vector<transfer> transfers;
  for (int k = 1; k < 16; ++k) transfers.push_back({0, k, 1e-3 * k, 1.0});
  const auto timing = simulate(net, transfers, false);
  for (std::size_t i = 0; i < transfers.size(); ++i)
    EXPECT_NEAR(timing.transfers[i].finish, 1.0 + alpha + transfers[i].bytes / bandwidth, 1e-15) << "transfer " << i;
}

// One GPU sending to three peers of its node at once: through a switch the three share its port, over
// a link a pair each has its own.
TEST(network, a_gpu_sending_to_its_switched_peers_shares_its_port) {
  const link_model peer{bandwidth, alpha, "peer"}, ib{10e9, 5e-6, "ib"};
  const double n = 4e6;
  const std::vector<transfer> fan_out{{0, 1, n, 0}, {0, 2, n, 0}, {0, 3, n, 0}};
  for (const auto& t : simulate(topology::switched_nodes(4, 4, peer, ib, 4), fan_out).transfers)
    EXPECT_NEAR(t.finish, alpha + 3 * n / bandwidth, 1e-12);
  for (const auto& t : simulate(topology::nodes(4, 4, peer, ib, 4), fan_out).transfers)
    EXPECT_NEAR(t.finish, alpha + n / bandwidth, 1e-12);
}

TEST(network, transfers_sharing_a_link_share_its_bandwidth) {
  const auto net = topology::nodes(4, 2, {bandwidth, alpha, "peer"}, {10e9, 5e-6, "ib"}, 1);
  const double n = 4e6;
  // GPUs 0 and 1 both send to node 1 through node 0's one NIC, from the same instant.
  const std::vector<transfer> together{{0, 2, n, 0}, {1, 3, n, 0}};
  const auto shared = simulate(net, together);
  for (const auto& t : shared.transfers) EXPECT_NEAR(t.finish, 5e-6 + 2 * n / 10e9, 1e-12);
  ASSERT_EQ(shared.links.size(), 2U);  // up NIC 0, down NIC 1, both carrying the two
  // The second starts later: the first runs alone, then both at half speed, then the second alone.
  const double late = 1e-4;
  const std::vector<transfer> staggered{{0, 2, n, 0}, {1, 3, n, late}};
  const auto timing = simulate(net, staggered);
  const double alone = late * 10e9;  // bytes the first sent before the second began
  const double first = 5e-6 + late + 2 * (n - alone) / 10e9;
  EXPECT_NEAR(timing.transfers[0].finish, first, 1e-12);
  const double second_at_half = (first - late - 5e-6) * 10e9 / 2;
  EXPECT_NEAR(timing.transfers[1].finish, first + (n - second_at_half) / 10e9, 1e-12);
  // Inside a node the links are separate: no sharing.
  const std::vector<transfer> apart{{0, 1, n, 0}, {1, 0, n, 0}};
  for (const auto& t : simulate(net, apart).transfers) EXPECT_NEAR(t.finish, alpha + n * beta, 1e-12);
}

const std::vector<double> sizes = {1024.0, 1 << 20, 64.0 * (1 << 20)};

// In one channel, and in the channels the model picks: two for more than two ranks, one each way round
// the ring, which halves the β terms (each direction of a link carries half of every block); on two
// ranks both channels would share the one link each way, so one is kept.
TEST(collective_cost, ring_algorithms_match_their_formulas) {
  algorithm_choice ring;
  ring.all_reduce = ring.all_gather = ring.reduce_scatter = algorithm::ring;
  algorithm_choice one_channel = ring;
  one_channel.by_modelled_cost = false;
  for (const int P : {2, 3, 5, 8, 12})
    for (const double n : sizes)
      for (const auto& choice : {one_channel, ring}) {
        const int channels = choice.by_modelled_cost && P > 2 ? 2 : 1;
        const std::string at =
            "P = " + std::to_string(P) + ", n = " + std::to_string(n) + ", " + std::to_string(channels) + " channels";
        const double b = n / channels;  // what one channel sends of a block
        // Fully connected, and a ring network, where r → r+1 never shares a link either.
        for (const auto& m :
             {fully_connected(P, choice), machine{gpu, topology::ring(P, {bandwidth, alpha, "l"}), choice}}) {
          expect_within_one_percent(modelled(m, P, {collective::all_gather, n, 0}), (P - 1) * (alpha + b * beta),
                                    "ring all-gather, " + at);
          expect_within_one_percent(modelled(m, P, {collective::reduce_scatter, n, 0}),
                                    (P - 1) * with_reduction(alpha + b * beta, n), "ring reduce-scatter, " + at);
          expect_within_one_percent(modelled(m, P, {collective::all_reduce, n, 0}),
                                    (P - 1) * (with_reduction(alpha + b / P * beta, n / P) + alpha + b / P * beta),
                                    "ring all-reduce, " + at);
          collective_cost costs(m);
          std::vector<int> devices(static_cast<std::size_t>(P));
          for (int r = 0; r < P; ++r) devices[static_cast<std::size_t>(r)] = r;
          EXPECT_EQ(costs.choose(costs.group_id(devices), devices, {collective::all_reduce, n, 0}).channels, channels)
              << at;
        }
      }
}

// A step's reduction overlaps its transfer segment by segment: on a device that reduces faster than the
// link delivers, a step lasts its transfer and one segment's reduction; on one that reduces slower, one
// segment's transfer and its whole reduction; in one segment, the two one after the other.
TEST(collective_cost, a_step_reduces_each_segment_while_the_next_arrives) {
  algorithm_choice ring;
  ring.reduce_scatter = algorithm::ring;
  ring.by_modelled_cost = false;
  const int P = 4;
  const double n = 16.0 * (1 << 20), segments = 16;
  const double sending = alpha + n * beta;
  for (const double memory_bandwidth : {1.5e12, 40e9}) {
    const device_model device{20e12, memory_bandwidth, 4e-6};
    const double reducing = device.reduction_time(n);
    const machine m{device, topology::fully_connected(P, {bandwidth, alpha, "l"}), ring};
    const double expected =
        memory_bandwidth > 3 * bandwidth ? sending + reducing / segments : sending / segments + reducing;
    expect_within_one_percent(modelled(m, P, {collective::reduce_scatter, n, 0}), (P - 1) * expected,
                              "ring reduce-scatter, memory at " + std::to_string(memory_bandwidth) + " bytes/s");
    machine whole = m;
    whole.algorithms.reduction_slice_bytes = n;
    expect_within_one_percent(modelled(whole, P, {collective::reduce_scatter, n, 0}), (P - 1) * (sending + reducing),
                              "ring reduce-scatter in one segment");
  }
}

TEST(collective_cost, recursive_algorithms_match_their_formulas) {
  algorithm_choice recursive;
  recursive.all_reduce = recursive.all_gather = recursive.reduce_scatter = algorithm::recursive_doubling;
  algorithm_choice rabenseifner;
  rabenseifner.all_reduce = algorithm::rabenseifner;
  for (const int P : {2, 4, 8, 16, 64})
    for (const double n : sizes) {
      const std::string at = "P = " + std::to_string(P) + ", n = " + std::to_string(n);
      const double steps = log2_of(P);
      // Recursive halving: step j (from 1) sends and reduces the half, quarter, ... of what is left;
      // Rabenseifner halves the whole vector n so, then gathers it back by recursive doubling.
      double halving = 0, halving_then_doubling = 0;
      for (int j = 1; j <= static_cast<int>(steps); ++j) {
        const double part = n / (1 << j);
        halving += with_reduction(alpha + P * part * beta, P * part);
        halving_then_doubling += with_reduction(alpha + part * beta, part) + alpha + part * beta;
      }
      expect_within_one_percent(modelled(fully_connected(P, recursive), P, {collective::all_gather, n, 0}),
                                steps * alpha + (P - 1) * n * beta, "recursive-doubling all-gather, " + at);
      expect_within_one_percent(modelled(fully_connected(P, recursive), P, {collective::reduce_scatter, n, 0}), halving,
                                "recursive-halving reduce-scatter, " + at);
      expect_within_one_percent(modelled(fully_connected(P, recursive), P, {collective::all_reduce, n, 0}),
                                steps * with_reduction(alpha + n * beta, n), "recursive-doubling all-reduce, " + at);
      expect_within_one_percent(modelled(fully_connected(P, rabenseifner), P, {collective::all_reduce, n, 0}),
                                halving_then_doubling, "Rabenseifner all-reduce, " + at);
    }
  // Not a power of two: two folding steps of n bytes around the recursion on P' = 4 ranks.
  const double n = 1 << 20;
  expect_within_one_percent(modelled(fully_connected(6, recursive), 6, {collective::all_reduce, n, 0}),
                            3 * with_reduction(alpha + n * beta, n) + alpha + n * beta,
                            "recursive-doubling all-reduce, P = 6");
}

TEST(collective_cost, all_to_all_broadcast_reduce_and_barrier_match_their_formulas) {
  algorithm_choice pipelined;
  pipelined.broadcast = algorithm::pipelined;
  pipelined.reduce = algorithm::pipelined;
  pipelined.pipeline_segment_bytes = 256 * 1024;
  algorithm_choice pairwise, direct;
  pairwise.all_to_all = algorithm::pairwise;
  direct.all_to_all = algorithm::direct;
  for (const int P : {2, 3, 4, 7, 8, 16})
    for (const double n : sizes) {
      const std::string at = "P = " + std::to_string(P) + ", n = " + std::to_string(n);
      expect_within_one_percent(modelled(fully_connected(P, pairwise), P, {collective::all_to_all, n, 0}),
                                (P - 1) * (alpha + n * beta), "pairwise all-to-all, " + at);
      // A link per pair: the P − 1 blocks travel side by side.
      expect_within_one_percent(modelled(fully_connected(P, direct), P, {collective::all_to_all, n, 0}),
                                alpha + n * beta, "direct all-to-all, " + at);
      algorithm_choice binomial;
      binomial.broadcast = algorithm::binomial;
      binomial.reduce = algorithm::binomial;
      expect_within_one_percent(modelled(fully_connected(P, binomial), P, {collective::broadcast, n, P - 1}),
                                ceil_log2(P) * (alpha + n * beta), "binomial broadcast, " + at);
      const double segments = std::max(1.0, std::ceil(n / pipelined.pipeline_segment_bytes));
      expect_within_one_percent(modelled(fully_connected(P, pipelined), P, {collective::broadcast, n, 1 % P}),
                                (P + segments - 2) * (alpha + n / segments * beta), "pipelined broadcast, " + at);
      expect_within_one_percent(modelled(fully_connected(P, binomial), P, {collective::reduce, n, 0}),
                                ceil_log2(P) * with_reduction(alpha + n * beta, n), "binomial reduce, " + at);
      // Each step a segment arrives and is reduced before it goes on down the chain.
      expect_within_one_percent(modelled(fully_connected(P, pipelined), P, {collective::reduce, n, P - 1}),
                                (P + segments - 2) * with_reduction(alpha + n / segments * beta, n / segments),
                                "pipelined reduce, " + at);
    }
  for (const int P : {2, 5, 8}) {
    expect_within_one_percent(modelled(fully_connected(P), P, {collective::barrier, 0, 0}), ceil_log2(P) * alpha,
                              "dissemination barrier, P = " + std::to_string(P));
  }
}

// Hierarchical all-reduce in nodes of 4 GPUs: a ring inside each node on the whole message, a ring
// across nodes on a quarter of it, with all 4 ranks of a node crossing at once through the node's
// NICs (one per node on the V100s, one per GPU on the MI210s and A100s), and a ring inside again
// (over NVLink a pair on the V100s, xGMI on the MI210s, each GPU's port to NVSwitch on the A100s). Its steps are
// those four rings' and its time the formula of comm/algorithms/hierarchical.hpp. On 8 GPUs it beats
// a flat ring in 2 channels, one each way, which crosses between nodes in each of its 14 steps.
TEST(collective_cost, hierarchical_all_reduce_matches_its_formula_and_beats_the_flat_ring_across_nodes) {
  constexpr int k = 4;
  for (const int P : {8, 16})
    for (const auto& [m, nics] : {std::pair{presets::v100_nodes(P, k), 1}, std::pair{presets::mi210_nodes(P, k), k},
                                  std::pair{presets::a100_nodes(P, k), k}}) {
      const int nodes = P / k;
      const link_model& in = m.network.peer_link();
      const link_model& out = m.network.network_link();
      const double reduce = m.device.reduction_time(1);
      std::vector<int> devices;
      for (int r = 0; r < P; ++r) devices.push_back(r);
      for (const double n : sizes) {
        const std::string at =
            "P = " + std::to_string(P) + ", " + std::to_string(nics) + " NICs per node, n = " + std::to_string(n);
        const auto steps =
            schedule(algorithm::hierarchical, {collective::all_reduce, n, 0}, P, 1 << 20, {.ranks_per_node = k});
        // Reduce-scatter inside, reduce-scatter and all-gather across, all-gather inside.
        ASSERT_EQ(steps.size(), 4U) << at;
        const std::int64_t repeats[] = {k - 1, nodes - 1, nodes - 1, k - 1};
        const double bytes[] = {n / k, n / P, n / P, n / k};
        const double reduced[] = {n / k, n / P, 0, 0};
        const int first_receiver[] = {1, k, k, 1};  // rank 0 sends to its right inside, to rank k across
        for (std::size_t s = 0; s < steps.size(); ++s) {
          EXPECT_EQ(steps[s].repeat, repeats[s]) << at << ", step " << s;
          ASSERT_EQ(steps[s].exchanges.size(), static_cast<std::size_t>(P)) << at << ", step " << s;
          EXPECT_EQ(steps[s].exchanges[0].destination, first_receiver[s]) << at << ", step " << s;
          EXPECT_DOUBLE_EQ(steps[s].exchanges[0].bytes, bytes[s]) << at << ", step " << s;
          EXPECT_DOUBLE_EQ(steps[s].reduced_bytes, reduced[s]) << at << ", step " << s;
        }
        const double crossing = static_cast<double>(k) / nics * n / P / out.bandwidth;
        const double inside = in.latency + n / k / in.bandwidth, across = out.latency + crossing;
        const double formula = (k - 1) * (with_reduction(inside, n / k, reduce) + inside) +
                               (nodes - 1) * (with_reduction(across, n / P, reduce) + across);
        const collective_cost costs(m);
        const double hierarchical = costs.play({devices}, steps, nullptr, 0);
        expect_within_one_percent(hierarchical, formula, "hierarchical all-reduce, " + at);
        if (P == 8 && n == sizes.back()) {
          const auto flat = schedule(algorithm::ring, {collective::all_reduce, n, 0}, P, 1 << 20, {}, 2);
          EXPECT_LT(hierarchical, 0.9 * costs.play({devices}, flat, nullptr, 0)) << at;
        }
      }
    }
  // In nodes of one rank it is the flat ring.
  const auto ring = schedule(algorithm::ring, {collective::all_reduce, 1e6, 0}, 6);
  const auto single = schedule(algorithm::hierarchical, {collective::all_reduce, 1e6, 0}, 6, 1 << 20, {});
  ASSERT_EQ(single.size(), ring.size());
  for (std::size_t s = 0; s < ring.size(); ++s) {
    EXPECT_EQ(single[s].exchanges, ring[s].exchanges);
    EXPECT_EQ(single[s].repeat, ring[s].repeat);
  }
}

// Rings in C channels rotated in nodes of k (comm/algorithms/pattern.hpp) leave each node from
// min(C, k) GPUs. Where each GPU has a NIC of its own (the MI210 and A100 nodes), a ring all-gather's
// step across nodes sends n/min(C, k) of every block through a NIC, against n/2 for the flat rings,
// one each way; the model picks k channels for the ring reduce-scatter and all-gather, and prices
// them so. Where a node's GPUs share one NIC (the V100 nodes), every channel crosses through it, more
// channels gain nothing, and the model keeps one.
TEST(collective_cost, rings_rotated_in_their_nodes_cross_through_every_nic) {
  constexpr int P = 16;
  const double n = sizes.back();
  std::vector<int> devices;
  for (int r = 0; r < P; ++r) devices.push_back(r);
  for (const auto& [preset, k] : {std::pair{presets::mi210_nodes(P, 4), 4}, std::pair{presets::a100_nodes(P, 8), 8}}) {
    machine m = preset;
    m.algorithms.all_gather = m.algorithms.reduce_scatter = algorithm::ring;
    const link_model& out = m.network.network_link();
    const std::string at = std::to_string(P) + " GPUs in nodes of " + std::to_string(k);
    collective_cost costs(m);
    for (int channels = 2; channels <= most_channels(algorithm::ring, {k}); channels *= 2) {
      const auto steps = schedule(algorithm::ring, {collective::all_gather, n, 0}, P, 1 << 20, {k}, channels);
      expect_within_one_percent(costs.play({devices}, steps, nullptr, 0),
                                (P - 1) * (out.latency + n / std::min(channels, k) / out.bandwidth),
                                "ring all-gather in " + std::to_string(channels) + " channels, " + at);
    }
    const int group = costs.group_id(devices);
    for (const collective kind : {collective::all_gather, collective::reduce_scatter})
      EXPECT_EQ(costs.choose(group, devices, {kind, n, 0}).channels, k) << name_of(kind) << ", " << at;
    expect_within_one_percent(
        costs.duration(group, devices, {collective::reduce_scatter, n, 0}),
        (P - 1) * with_reduction(out.latency + n / k / out.bandwidth, n, m.device.reduction_time(1)),
        "ring reduce-scatter, " + at);
  }
  machine shared_nic = presets::v100_nodes(P, 4);
  shared_nic.algorithms.all_gather = algorithm::ring;
  collective_cost costs(shared_nic);
  EXPECT_EQ(costs.choose(costs.group_id(devices), devices, {collective::all_gather, n, 0}).channels, 1);
}

// The workgroup a persistent kernel's next task goes to: the one free first, the lower on a tie, as a
// priority queue of (time, workgroup) gives; durations of whole units make ties common.
TEST(free_first, hands_each_task_to_the_workgroup_free_first_and_the_lower_on_a_tie) {
  const std::vector<double> clocks{3, 0, 2, 0, 5, 1, 0};
  free_first queue(clocks);
  std::priority_queue<std::pair<double, int>, std::vector<std::pair<double, int>>, std::greater<>> reference;
  for (std::size_t w = 0; w < clocks.size(); ++w) reference.emplace(clocks[w], static_cast<int>(w));
  for (int task = 0; task < 200; ++task) {
    const auto [time, workgroup] = reference.top();
    reference.pop();
    ASSERT_EQ(queue.workgroup(), workgroup) << "task " << task;
    ASSERT_EQ(queue.time(), time) << "task " << task;
    const double busy_until = time + static_cast<double>((task * 7) % 4);
    queue.busy_until(busy_until);
    reference.emplace(busy_until, workgroup);
  }
}

// Pairwise all-to-all over two nodes of two GPUs with one NIC each: in step 2 both GPUs of a node
// send across at once through their node's NIC, so that step takes twice the bytes' time.
TEST(collective_cost, link_sharing_slows_the_steps_that_share) {
  const link_model peer{bandwidth, alpha, "peer"};
  const link_model ib{10e9, 5e-6, "ib"};
  algorithm_choice pairwise;
  pairwise.all_to_all = algorithm::pairwise;
  const machine m{gpu, topology::nodes(4, 2, peer, ib, 1), pairwise};
  for (const double b : sizes) {
    const double step1 = std::max(alpha + b * beta, 5e-6 + b / 10e9);  // 0→1 inside, 1→2 across
    const double step2 = 5e-6 + 2 * b / 10e9;                          // 0→2 and 1→3 share NIC 0
    const double step3 = 5e-6 + b / 10e9;                              // 0→3, 2→1 across, alone
    expect_within_one_percent(modelled(m, 4, {collective::all_to_all, b, 0}), step1 + step2 + step3,
                              "shared all-to-all, b = " + std::to_string(b));
    // With a NIC per GPU nothing is shared.
    const machine own_nics{gpu, topology::nodes(4, 2, peer, ib, 2), pairwise};
    expect_within_one_percent(modelled(own_nics, 4, {collective::all_to_all, b, 0}), step1 + 2 * (5e-6 + b / 10e9),
                              "all-to-all with a NIC per GPU, b = " + std::to_string(b));
  }
}

// Two ring all-gathers on the first and the second GPU of four nodes, whose two GPUs share one NIC
// (the groups' translates left out, so the only company is the one given): every step of each sends
// b through the NIC, so beside the other from its first step each step carries 2b; beside one that
// has done half of its 3 steps, one step of the other's is skipped and 2 of the 3 share; beside one
// that ended before it starts, or on a network where the groups share no link, it takes its time alone.
TEST(collective_cost, a_collective_beside_another_shares_the_links_both_use) {
  const link_model peer{bandwidth, alpha, "peer"};
  const link_model ib{10e9, 5e-6, "ib"};
  const auto ring_gathers = [](topology net) {
    machine m{gpu, std::move(net)};
    m.algorithms.all_gather = algorithm::ring;
    m.algorithms.by_modelled_cost = false;
    m.axis_groups_share_links = false;
    return m;
  };
  const std::vector<int> first{0, 2, 4, 6}, second{1, 3, 5, 7};
  for (const double b : sizes) {
    const collective_shape shape{collective::all_gather, b, 0};
    const machine shared_nic = ring_gathers(topology::nodes(8, 2, peer, ib, 1));
    collective_cost costs(shared_nic);
    const int own = costs.group_id(first), other = costs.group_id(second);
    const double alone = costs.duration(own, first, shape);
    const double other_alone = costs.duration(other, second, shape);
    const auto beside = [&](double other_start) {
      const std::vector<running_collective> running{{other, shape, other_start, other_start + other_alone}};
      return costs.duration_beside(own, first, shape, 0, running);
    };
    const std::string at = "b = " + std::to_string(b);
    expect_within_one_percent(beside(0), alone + 3 * b / 10e9, "beside from its first step, " + at);
    expect_within_one_percent(beside(-other_alone / 2), alone + 2 * b / 10e9, "beside one half done, " + at);
    EXPECT_EQ(beside(-other_alone), alone) << "beside one that has ended, " << at;

    const machine own_nics = ring_gathers(topology::nodes(8, 2, peer, ib, 2));
    collective_cost apart(own_nics);
    const int own_apart = apart.group_id(first), other_apart = apart.group_id(second);
    const double alone_apart = apart.duration(own_apart, first, shape);
    const std::vector<running_collective> running{{other_apart, shape, 0, apart.duration(other_apart, second, shape)}};
    EXPECT_DOUBLE_EQ(apart.duration_beside(own_apart, first, shape, 0, running), alone_apart)
        << "a NIC per GPU, " << at;
  }
}

// The steps come from comm/algorithms/, one per step of the algorithm on every rank; alike neighbours
// are played once with a repeat count, which keeps 1024-rank collectives cheap to cost.
// Groups the network cannot tell apart (the same nodes and network interfaces up to renaming, their
// translates' too; the same offsets on a ring or torus) are simulated once, and each gets the duration
// a fresh cost model gives it; groups that share an interface differently, or lie otherwise on a
// torus, are kept apart.
TEST(collective_cost, groups_alike_on_the_network_are_simulated_once_each) {
  const link_model peer{bandwidth, alpha, "peer"};
  const link_model ib{10e9, 5e-6, "ib"};
  struct case_of {
    machine m;
    std::vector<std::vector<int>> groups;
    std::size_t placements;
  };
  const std::vector<case_of> cases = {
      // Nodes of 4 GPUs with 2 NICs each (GPUs 0 and 1 share one): within a node; one GPU per node on
      // its node's first NIC; two nodes with both GPUs on one NIC, or on two. The two groups of one GPU
      // per node are alike, but the labels, numbered in order of appearance, meet their translates'
      // NICs in another order: two placements where one would do (a simulation more, not a wrong one).
      {{gpu, topology::nodes(32, 4, peer, ib, 2)},
       {{0, 1, 2, 3}, {4, 5, 6, 7}, {0, 4, 8, 12}, {1, 5, 9, 13}, {0, 1, 4, 5}, {8, 9, 12, 13}, {0, 2, 4, 6}},
       5},
      {{gpu, topology::ring(16, peer)}, {{0, 2, 4, 6}, {5, 7, 9, 11}, {15, 1, 3, 5}, {0, 1, 2, 3}}, 2},
      {{gpu, topology::torus_2d(4, 4, peer)}, {{0, 1, 2, 3}, {4, 5, 6, 7}, {0, 4, 8, 12}, {1, 5, 9, 13}}, 2},
      {{gpu, topology::fully_connected(16, peer)}, {{0, 1, 2, 3}, {3, 9, 12, 15}, {0, 1, 2, 3, 4, 5}}, 2},
  };
  for (const case_of& c : cases) {
    collective_cost shared(c.m);
    for (const auto& devices : c.groups) {
      const int group = shared.group_id(devices);
      for (const collective_shape& shape : {collective_shape{collective::all_reduce, 64.0 * (1 << 20), 0},
                                            collective_shape{collective::all_to_all, 1 << 20, 0},
                                            collective_shape{collective::broadcast, 1 << 24, 1}}) {
        collective_cost alone(c.m);
        EXPECT_EQ(shared.duration(group, devices, shape), alone.duration(alone.group_id(devices), devices, shape))
            << name_of(shape.kind) << " on group starting at " << devices.front();
      }
    }
    EXPECT_EQ(shared.groups(), c.groups.size());
    EXPECT_EQ(shared.placements(), c.placements);
  }
  // The two placements of two nodes differ, priced alone: both GPUs of a node behind one NIC take longer.
  machine alone_on_the_network{gpu, topology::nodes(32, 4, peer, ib, 2)};
  alone_on_the_network.axis_groups_share_links = false;
  collective_cost costs(alone_on_the_network);
  const std::vector<int> one_nic{0, 1, 4, 5}, two_nics{0, 2, 4, 6};
  const collective_shape shape{collective::all_to_all, 1 << 20, 0};
  EXPECT_GT(costs.duration(costs.group_id(one_nic), one_nic, shape),
            costs.duration(costs.group_id(two_nics), two_nics, shape));
}

// A ring all-gather of blocks of b bytes on a group of `net`'s devices, in one channel (as the
// formulas count), priced with the translates of the group beside it and alone.
class ring_gather_on {
 public:
  explicit ring_gather_on(topology net) : together_(one_channel_ring(std::move(net))), alone_(together_) {
    alone_.axis_groups_share_links = false;
  }
  [[nodiscard]] double together(const std::vector<int>& devices, double b) const {
    return duration(together_, devices, b);
  }
  [[nodiscard]] double alone(const std::vector<int>& devices, double b) const { return duration(alone_, devices, b); }

 private:
  static machine one_channel_ring(topology net) {
    machine m{gpu, std::move(net)};
    m.algorithms.all_gather = algorithm::ring;
    m.algorithms.by_modelled_cost = false;
    return m;
  }
  static double duration(const machine& m, const std::vector<int>& devices, double b) {
    collective_cost costs(m);
    return costs.duration(costs.group_id(devices), devices, {collective::all_gather, b, 0});
  }
  machine together_;
  machine alone_;
};

// Nodes of 4 GPUs behind one NIC: a group of one GPU per node has three translates (the other
// positions in the nodes), and the four groups' rings cross each NIC together, so each transfer gets a
// quarter of it. A group inside one node shares no link with its translates in the other nodes.
TEST(collective_cost, the_groups_of_a_mesh_axis_share_the_links_they_cross) {
  const link_model peer{bandwidth, alpha, "peer"};
  const link_model ib{10e9, 5e-6, "ib"};
  const ring_gather_on nodes(topology::nodes(16, 4, peer, ib, 1));
  const double b = 1 << 24;
  const std::vector<int> across{0, 4, 8, 12}, inside{4, 5, 6, 7};
  expect_within_one_percent(nodes.alone(across, b), 3 * (ib.latency + b / ib.bandwidth), "one line of the axis alone");
  expect_within_one_percent(nodes.together(across, b), 3 * (ib.latency + 4 * b / ib.bandwidth),
                            "the axis's four lines together");
  EXPECT_EQ(nodes.together(inside, b), nodes.alone(inside, b));
  expect_within_one_percent(nodes.together(inside, b), 3 * (alpha + b * beta), "a group inside a node");
  // Routes of disjoint pairs meet behind a shared NIC and on multi-hop networks only.
  EXPECT_TRUE(topology::nodes(16, 4, peer, ib, 1).disjoint_routes_can_meet());
  EXPECT_TRUE(topology::torus_2d(4, 4, peer).disjoint_routes_can_meet());
  EXPECT_TRUE(topology::ring(8, peer).disjoint_routes_can_meet());
  EXPECT_FALSE(topology::nodes(16, 4, peer, ib, 4).disjoint_routes_can_meet());
  EXPECT_FALSE(topology::fully_connected(8, peer).disjoint_routes_can_meet());
  // The whole machine has no translate to share with.
  const std::vector<int> all{0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15};
  EXPECT_EQ(nodes.together(all, b), nodes.alone(all, b));
}

// The groups of one core of every chip in a row have the other core's group beside them, whose
// transfers cross the same chip links: a ring along the row takes twice as long in their company.
// The two cores of a chip meet over their own link.
TEST(collective_cost, the_cores_of_a_chip_share_its_links) {
  const link_model ici{bandwidth, alpha, "ici"};
  const link_model between{2 * bandwidth, alpha / 2, "between cores"};
  const ring_gather_on row(topology::torus_2d(1, 4, ici, 2, between));
  const double b = 1 << 24;
  const std::vector<int> first_cores{0, 2, 4, 6};
  expect_within_one_percent(row.alone(first_cores, b), 3 * (alpha + b * beta), "one core's row alone");
  expect_within_one_percent(row.together(first_cores, b), 3 * (alpha + 2 * b * beta), "beside the other core's row");
  expect_within_one_percent(row.together({0, 1}, b), between.latency + b / between.bandwidth,
                            "the two cores of a chip");
}

// On a torus the rows count as nodes: the hierarchical all-reduce goes along the rows, down the columns
// and along the rows again, every step one hop, and the modelled choice takes it over the flat ring,
// whose 2(P-1) steps pay the latency 2(P-1) times for the same bytes. It takes it in four channels:
// two along the rows first, one each way, and two down the columns first, so on a square torus every
// step keeps all four links of a chip busy in both directions, each with a quarter of the bytes.
TEST(collective_cost, a_torus_all_reduces_along_its_rows_then_down_its_columns) {
  const link_model ici{bandwidth, alpha, "ici"};
  const machine torus{gpu, topology::torus_2d(8, 8, ici)};
  const int P = 64, k = 8;
  const double n = 64.0 * (1 << 20);
  std::vector<int> devices;
  for (int r = 0; r < P; ++r) devices.push_back(r);
  collective_cost costs(torus);
  const int group = costs.group_id(devices);
  const collective_shape shape{collective::all_reduce, n, 0};
  EXPECT_EQ(costs.choose(group, devices, shape).chosen, algorithm::hierarchical);
  EXPECT_EQ(costs.choose(group, devices, shape).channels, 4);
  const auto formula = [&](int channels) {
    const double along = alpha + n / k / channels * beta, down = alpha + n / P / channels * beta;
    return (k - 1) * (with_reduction(along, n / k) + along) + (P / k - 1) * (with_reduction(down, n / P) + down);
  };
  expect_within_one_percent(costs.duration(group, devices, shape), formula(4),
                            "hierarchical all-reduce on the torus, four channels");
  machine one_channel = torus;
  one_channel.algorithms.by_modelled_cost = false;
  one_channel.algorithms.all_reduce = algorithm::hierarchical;
  expect_within_one_percent(modelled(one_channel, P, shape), formula(1),
                            "hierarchical all-reduce on the torus, one channel");
  machine flat = torus;
  flat.algorithms.all_reduce = algorithm::ring;
  EXPECT_LT(costs.duration(group, devices, shape), modelled(flat, P, shape));
}

// Over many groups — strided lines that tile the machine, and scattered ones that do not — on every
// topology whose routes can meet: a group priced from a cost cache that has seen every other group
// costs what it costs priced first (so a placement class never joins groups the network tells apart),
// and its company never makes it faster than alone.
TEST(collective_cost, company_is_cached_by_placement_and_only_slows) {
  const link_model peer{bandwidth, alpha, "peer"};
  const link_model ib{10e9, 5e-6, "ib"};
  const std::vector<topology> networks = {topology::nodes(32, 4, peer, ib, 1), topology::nodes(32, 4, peer, ib, 2),
                                          topology::torus_2d(4, 8, peer), topology::torus_2d(2, 4, peer, 2, ib),
                                          topology::ring(16, peer)};
  std::uint64_t state = 12345;
  const auto next = [&](int below) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<int>((state >> 33) % static_cast<std::uint64_t>(below));
  };
  for (const topology& net : networks) {
    const machine together{gpu, net};
    machine alone = together;
    alone.axis_groups_share_links = false;
    const int P = net.devices();
    std::vector<std::vector<int>> groups;
    for (const int stride : {1, 2, 4, 8})
      for (const int size : {2, 4})
        if (stride * size <= P)
          for (const int first : {0, 1, 3}) {
            std::vector<int> line;
            for (int i = 0; i < size; ++i) line.push_back((first + i * stride) % P);
            groups.push_back(line);
          }
    for (int g = 0; g < 6; ++g) {
      std::vector<int> scattered;
      for (int i = 0; i < 4; ++i) {
        int d = next(P);
        while (std::find(scattered.begin(), scattered.end(), d) != scattered.end()) d = (d + 1) % P;
        scattered.push_back(d);
      }
      groups.push_back(scattered);
    }
    collective_cost shared(together);
    for (const auto& devices : groups) (void)shared.group_id(devices);
    for (const auto& devices : groups)
      for (const collective_shape& shape : {collective_shape{collective::all_reduce, 8.0 * (1 << 20), 0},
                                            collective_shape{collective::all_gather, 1 << 20, 0},
                                            collective_shape{collective::broadcast, 1 << 22, 1}}) {
        collective_cost fresh(together), lone(alone);
        const double cached = shared.duration(shared.group_id(devices), devices, shape);
        const std::string what = std::string(name_of(shape.kind)) + " on a group starting at " +
                                 std::to_string(devices.front()) + " of " + std::to_string(devices.size()) +
                                 ", network of kind " + std::to_string(static_cast<int>(net.kind()));
        EXPECT_EQ(cached, fresh.duration(fresh.group_id(devices), devices, shape)) << what;
        EXPECT_GE(cached, lone.duration(lone.group_id(devices), devices, shape) * (1 - 1e-12)) << what;
      }
  }
}

TEST(schedule, alike_steps_are_merged_so_large_groups_stay_cheap) {
  const auto ring = schedule(algorithm::ring, {collective::all_reduce, 1 << 20, 0}, 1024);
  ASSERT_EQ(ring.size(), 2U);  // the reduce-scatter's 1023 steps, then the all-gather's
  for (const auto& s : ring) {
    EXPECT_EQ(s.repeat, 1023);
    ASSERT_EQ(s.exchanges.size(), 1024U);
    EXPECT_EQ(s.exchanges[5].destination, 6);
    EXPECT_DOUBLE_EQ(s.exchanges[5].bytes, 1024.0);
  }
  EXPECT_DOUBLE_EQ(ring[0].reduced_bytes, 1024.0);
  EXPECT_DOUBLE_EQ(ring[1].reduced_bytes, 0.0);
  // Rabenseifner on 12 ranks: fold in, 3 halving and 3 doubling steps on 8, fold out; none alike.
  const auto folded = schedule(algorithm::rabenseifner, {collective::all_reduce, 8000, 0}, 12);
  ASSERT_EQ(folded.size(), 8U);
  EXPECT_EQ(folded.front().exchanges.size(), 4U);
  EXPECT_DOUBLE_EQ(folded.front().reduced_bytes, 8000.0);
  EXPECT_DOUBLE_EQ(folded[1].exchanges[0].bytes, 4000.0);
  EXPECT_DOUBLE_EQ(folded[3].exchanges[0].bytes, 1000.0);
  EXPECT_DOUBLE_EQ(folded[4].exchanges[0].bytes, 1000.0);
  EXPECT_DOUBLE_EQ(folded[6].exchanges[0].bytes, 4000.0);
  // A pipelined broadcast of 100 segments on 4 ranks: 2 steps fill the chain, 98 full ones (merged), 2 drain it.
  const auto chain = schedule(algorithm::pipelined, {collective::broadcast, 100.0 * (1 << 20), 2}, 4, 1 << 20);
  ASSERT_EQ(chain.size(), 5U);
  EXPECT_EQ(chain[2].repeat, 98);
  EXPECT_EQ(chain[2].exchanges.size(), 3U);
}

// The runs of steps a pattern declares alike are evaluated once; the schedule must be the one that
// evaluating every step gives.
TEST(schedule, runs_of_alike_steps_evaluated_once_give_every_steps_schedule) {
  for (const collective kind : {collective::all_reduce, collective::reduce_scatter, collective::all_gather})
    for (const int P : {2, 3, 5, 8, 12, 16})
      for (const int k : {1, 2, 4})
        for (int channels = 1; channels <= most_channels(algorithm::ring, {k}); channels *= 2) {
          if (!shardwise::applies(kind, algorithm::ring, P, {k}, channels)) continue;
          const collective_shape shape{kind, 3000.0, 0};
          const auto pattern = shardwise::sim::detail::pattern_of(algorithm::ring, shape, P, 1 << 20, {k}, channels);
          const auto every =
              shardwise::sim::detail::steps_of(P, pattern.steps(), pattern.exchanges_per_step(),
                                               [&](int r, int step, int c) { return pattern.exchange(r, step, c); });
          const auto runs = schedule(algorithm::ring, shape, P, 1 << 20, {k}, channels);
          const std::string what = std::string(name_of(kind)) + ", P = " + std::to_string(P) + ", nodes of " +
                                   std::to_string(k) + ", " + std::to_string(channels) + " channels";
          ASSERT_EQ(runs.size(), every.size()) << what;
          for (std::size_t i = 0; i < runs.size(); ++i) {
            EXPECT_EQ(runs[i].exchanges, every[i].exchanges) << what << ", step " << i;
            EXPECT_EQ(runs[i].reduced_bytes, every[i].reduced_bytes) << what << ", step " << i;
            EXPECT_EQ(runs[i].repeat, every[i].repeat) << what << ", step " << i;
          }
        }
}

TEST(algorithm_choice, picks_by_size_and_rank_count_and_refuses_what_does_not_apply) {
  const algorithm_choice automatic;
  EXPECT_EQ(automatic.pick({collective::all_reduce, 1024, 0}, 6), algorithm::recursive_doubling);
  EXPECT_EQ(automatic.pick({collective::all_reduce, 1 << 24, 0}, 8), algorithm::rabenseifner);
  EXPECT_EQ(automatic.pick({collective::all_reduce, 1 << 24, 0}, 6), algorithm::ring);
  EXPECT_EQ(automatic.pick({collective::all_gather, 64, 0}, 8), algorithm::recursive_doubling);
  EXPECT_EQ(automatic.pick({collective::all_gather, 64, 0}, 6), algorithm::ring);
  // All-gather and reduce-scatter go by the whole result: 8 blocks of 16 KiB make 128 KiB, past
  // small_message_bytes, though each block is below it.
  EXPECT_EQ(automatic.pick({collective::all_gather, 16 * 1024, 0}, 8), algorithm::ring);
  EXPECT_EQ(automatic.pick({collective::reduce_scatter, 16 * 1024, 0}, 8), algorithm::ring);
  EXPECT_EQ(automatic.pick({collective::reduce_scatter, 4 * 1024, 0}, 8), algorithm::recursive_doubling);
  EXPECT_EQ(automatic.pick({collective::broadcast, 1 << 24, 0}, 8), algorithm::pipelined);
  // On 2 ranks a chain has one hop, nothing to pipeline: large messages go binomial, one message each.
  EXPECT_EQ(automatic.pick({collective::broadcast, 1 << 24, 0}, 2), algorithm::binomial);
  EXPECT_EQ(automatic.pick({collective::reduce, 1 << 24, 0}, 2), algorithm::binomial);
  EXPECT_EQ(automatic.pick({collective::reduce, 1 << 24, 0}, 3), algorithm::pipelined);
  algorithm_choice wrong;
  wrong.all_gather = algorithm::recursive_doubling;
  EXPECT_THROW((void)wrong.pick({collective::all_gather, 64, 0}, 6), shardwise::argument_error);
  wrong.all_gather = algorithm::pairwise;
  EXPECT_THROW((void)wrong.pick({collective::all_gather, 64, 0}, 8), shardwise::argument_error);
  EXPECT_EQ(automatic.pick({collective::all_to_all_v, 0, 0}, 8), algorithm::pairwise);
  wrong.all_to_all = algorithm::ring;
  EXPECT_THROW((void)wrong.pick({collective::all_to_all, 64, 0}, 8), shardwise::argument_error);
}

// An all-to-all leaves each rank's blocks through one port on nodes of one GPU and inside a switched
// node, and through a link per peer inside a node of links a pair: the direct all-to-all posts every
// block at once and saves the waits between the pairwise steps where they share a port, and all but
// one block's time where they do not, so the model takes it on all three; each takes its own formula,
// uneven blocks included.
TEST(algorithm_choice, the_direct_all_to_all_sends_every_block_at_once) {
  constexpr int P = 4;
  const double block = 1 << 20;
  const std::vector<int> devices{0, 1, 2, 3};
  const std::vector<std::vector<double>> even(P, std::vector<double>(P, block));
  for (const machine& m : {presets::mi210_nodes(P, 1), presets::mi210_nodes(P, P), presets::a100_nodes(P, P)}) {
    const bool one_node = P == m.network.gpus_per_node();
    const link_model& link = one_node ? m.network.peer_link() : m.network.network_link();
    const double ports = one_node && !m.network.switched() ? 1 : P - 1;  // blocks sharing a port at once
    collective_cost costs(m);
    const auto chosen = costs.choose(costs.group_id(devices), devices, {collective::all_to_all, block, 0});
    EXPECT_EQ(chosen.chosen, algorithm::direct);
    const double route_latency = m.network.route_between(0, 1).latency;
    expect_within_one_percent(chosen.seconds, route_latency + ports * block / link.bandwidth,
                              "direct all-to-all on " + link.kind);
    const auto uneven = costs.choose(devices, even);
    EXPECT_EQ(uneven.chosen, algorithm::direct);
    EXPECT_DOUBLE_EQ(uneven.seconds, chosen.seconds);
    machine by_rule = m;
    by_rule.algorithms.by_modelled_cost = false;
    const auto pairwise = collective_cost(by_rule).choose(devices, even);
    EXPECT_EQ(pairwise.chosen, algorithm::pairwise);
    expect_within_one_percent(pairwise.seconds, (P - 1) * (route_latency + block / link.bandwidth),
                              "pairwise all-to-all on " + link.kind);
  }
}

// `model` with `kind`'s algorithm fixed to `a`.
machine with_algorithm(machine model, collective kind, algorithm a) {
  if (kind == collective::all_reduce) model.algorithms.all_reduce = a;
  if (kind == collective::all_gather) model.algorithms.all_gather = a;
  if (kind == collective::reduce_scatter) model.algorithms.reduce_scatter = a;
  if (kind == collective::broadcast) model.algorithms.broadcast = a;
  if (kind == collective::reduce) model.algorithms.reduce = a;
  if (kind == collective::all_to_all) model.algorithms.all_to_all = a;
  return model;
}

// The automatic choice by modelled cost: with the 4 GPUs of a node behind one network interface
// (v100_nodes), Rabenseifner's exchanges across nodes queue on the interface, so the model leaves the
// MPICH rule's Rabenseifner for the hierarchical algorithm (nodes taken from the topology), and is
// faster; with a network interface per GPU (mi210_nodes) too. Wherever it chooses, it chooses the
// fastest of the algorithms that apply.
TEST(algorithm_choice, by_modelled_cost_takes_the_fastest_algorithm_for_the_placement) {
  std::vector<int> devices{0, 1, 2, 3, 4, 5, 6, 7};
  const collective_shape large{collective::all_reduce, 64.0 * (1 << 20), 0};
  machine by_rule = presets::v100_nodes(8, 4);
  by_rule.algorithms.by_modelled_cost = false;
  collective_cost ruled(by_rule);
  EXPECT_EQ(ruled.choose(ruled.group_id(devices), devices, large).chosen, algorithm::rabenseifner);
  const machine by_cost = presets::v100_nodes(8, 4);
  collective_cost costed(by_cost);
  const int group = costed.group_id(devices);
  EXPECT_EQ(costed.choose(group, devices, large).chosen, algorithm::hierarchical);
  EXPECT_LT(costed.duration(group, devices, large), ruled.duration(ruled.group_id(devices), devices, large));
  const machine mi210 = presets::mi210_nodes(8, 4);
  collective_cost per_gpu_interface(mi210);
  EXPECT_EQ(per_gpu_interface.choose(per_gpu_interface.group_id(devices), devices, large).chosen,
            algorithm::hierarchical);

  for (const collective_shape& shape :
       {large, collective_shape{collective::all_reduce, 1024, 0}, collective_shape{collective::all_gather, 1 << 20, 0},
        collective_shape{collective::reduce_scatter, 64, 0}, collective_shape{collective::broadcast, 1 << 24, 3},
        collective_shape{collective::reduce, 1 << 24, 5}, collective_shape{collective::all_to_all, 1 << 20, 0}}) {
    const algorithm chosen = costed.choose(group, devices, shape).chosen;
    for (const algorithm a :
         {algorithm::ring, algorithm::recursive_doubling, algorithm::rabenseifner, algorithm::hierarchical,
          algorithm::binomial, algorithm::pipelined, algorithm::pairwise, algorithm::direct}) {
      if (!shardwise::applies(shape.kind, a, 8, {4})) continue;
      const machine fixed = with_algorithm(by_cost, shape.kind, a);
      collective_cost one(fixed);
      EXPECT_LE(costed.duration(group, devices, shape), one.duration(one.group_id(devices), devices, shape))
          << name_of(shape.kind) << ": " << name_of(chosen) << " chosen, " << name_of(a) << " is faster";
    }
  }
}

// More channels are taken for time they save, not for a rounding: on V100 nodes, whose one NIC a
// node's channels all cross, a ring in 2-8 channels can come out a last bit cheaper than in one on
// these groups, and which won would turn on how the compiler rounded.
TEST(algorithm_choice, channels_that_save_only_a_rounding_are_not_taken) {
  const machine model = presets::v100_nodes(64);
  machine in_one_channel = model;
  in_one_channel.algorithms.by_modelled_cost = false;
  collective_cost costs(model);
  for (const auto& devices :
       {std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, std::vector<int>{0, 2, 4, 6}})
    for (const collective kind : {collective::all_gather, collective::reduce_scatter, collective::all_reduce})
      for (double bytes = 1 << 15; bytes <= 1 << 26; bytes *= 2) {
        const collective_shape shape{kind, bytes, 0};
        const auto chosen = costs.choose(costs.group_id(devices), devices, shape);
        if (chosen.channels == 1) continue;
        const machine fixed = with_algorithm(in_one_channel, kind, chosen.chosen);
        collective_cost one(fixed);
        const double one_channel = one.duration(one.group_id(devices), devices, shape);
        EXPECT_LT(chosen.seconds, one_channel * (1 - 1e-9))
            << name_of(kind) << " of " << bytes << " bytes on " << devices.size() << " GPUs: " << name_of(chosen.chosen)
            << " in " << chosen.channels << " channels";
      }
}

TEST(presets, describe_the_papers_machines) {
  const auto mi210 = presets::mi210_nodes(8);
  EXPECT_EQ(mi210.network.devices(), 8);
  EXPECT_DOUBLE_EQ(mi210.network.peer_link().bandwidth, 80e9);
  EXPECT_DOUBLE_EQ(mi210.network.network_link().bandwidth, 20e9);
  const auto v100 = presets::v100_nodes(16);
  EXPECT_DOUBLE_EQ(v100.network.network_link().bandwidth, 100e9 / 8);
  EXPECT_THROW((void)presets::v100_nodes(6), shardwise::argument_error);
  // DGX A100 and H100 nodes of 8: each GPU's NVLink ports to NVSwitch (300 and 450 GB/s a direction)
  // and a NIC of its own (HDR 200 and NDR 400 Gb/s); bf16 products on the tensor cores.
  for (const auto& [dgx, port, nic] :
       {std::tuple{presets::a100_nodes(16), 300e9, 200e9 / 8}, std::tuple{presets::h100_nodes(16), 450e9, 400e9 / 8}}) {
    EXPECT_EQ(dgx.network.gpus_per_node(), 8);
    EXPECT_TRUE(dgx.network.switched());
    EXPECT_DOUBLE_EQ(dgx.network.peer_link().bandwidth, port);
    EXPECT_DOUBLE_EQ(dgx.network.network_link().bandwidth, nic);
    EXPECT_NE(dgx.network.nic_of(0), dgx.network.nic_of(7));
    EXPECT_GT(dgx.device.bf16_matrix_flops, dgx.device.peak_flops);
  }
  EXPECT_THROW((void)presets::h100_nodes(12), shardwise::argument_error);
  // A full TPU v3 pod: 1024 chips in a 32 x 32 torus; a ring all-reduce round a row of 32 takes its
  // 2 · 31 steps on the ICI links between neighbours, one hop each, in two channels, one each way.
  const auto cores = presets::tpu_v3_pod(32, 32, 2);
  EXPECT_EQ(cores.network.devices(), 2048);
  EXPECT_DOUBLE_EQ(cores.device.memory_bandwidth, presets::tpu_v3_core().memory_bandwidth);
  // A GPU's kernels are launched from the host one by one; a TPU runs the step as one compiled program.
  EXPECT_GT(v100.device.launch_latency, 0);
  EXPECT_EQ(cores.device.launch_latency, 0);
  EXPECT_EQ(presets::tpu_v3_chip().launch_latency, 0);
  EXPECT_THROW((void)presets::tpu_v3_pod(32, 32, 3), shardwise::argument_error);
  // The fused paper's scale-out: 128 MI210s in a 16 x 8 torus of 200 Gb/s links, 700 ns a hop.
  const auto scale_out = presets::mi210_torus(16, 8);
  EXPECT_EQ(scale_out.network.devices(), 128);
  EXPECT_EQ(scale_out.network.kind(), topology::shape::torus_2d);
  EXPECT_DOUBLE_EQ(scale_out.network.peer_link().bandwidth, 200e9 / 8);
  EXPECT_DOUBLE_EQ(scale_out.network.route_between(0, 2).latency, 2 * 700e-9);
  EXPECT_DOUBLE_EQ(scale_out.device.peak_flops, presets::mi210().peak_flops);
  const auto pod = presets::tpu_v3_pod(32, 32);
  EXPECT_EQ(pod.network.devices(), 1024);
  EXPECT_EQ(pod.network.kind(), topology::shape::torus_2d);
  EXPECT_EQ(pod.network.route_between(0, 31).links.size(), 1U);  // wrap-around neighbour
  EXPECT_EQ(pod.network.route_between(0, 32 * 16).links.size(), 16U);
  machine ring = pod;
  ring.algorithms.all_reduce = algorithm::ring;
  collective_cost costs(ring);
  std::vector<int> row;
  for (int c = 0; c < 32; ++c) row.push_back(c);
  const double n = 64.0 * (1 << 20);
  const double ici = pod.network.peer_link().bandwidth;
  expect_within_one_percent(
      costs.duration(costs.group_id(row), row, {collective::all_reduce, n, 0}),
      31 * (with_reduction(1e-6 + n / 32 / 2 / ici, n / 32, pod.device.reduction_time(1)) + 1e-6 + n / 32 / 2 / ici),
      "ring all-reduce round a row of the pod");
}

}  // namespace
