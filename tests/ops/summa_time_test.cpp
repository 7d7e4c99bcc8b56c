// SUMMA's broadcasts in modelled time, on simulated MI210s (sim_gpu, shapes only: one node
// of 4 GPUs joined by xGMI, a 2 x 2 grid, collectives on a stream of their own). Each step's panel is
// copied by its owner into a slot (a kernel c) and broadcast to the other rank of its line (b); the
// step's product (g) waits for it. Broadcast ahead (matmul_options::summa), step 1's copy and broadcast
// travel during step 0's product; in turn, they follow it. So where a product outlasts a copy and a
// broadcast, in turn takes c + b longer, in each form; for C = A·B, whose rank (0, 0) owns both
// step-0 panels,
//   ahead:   2c + b + 2g          in turn: 3c + 2b + 2g
// (step 1's owners copy after their product in turn).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "shardwise/core/work.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/ops/matmul.hpp"
#include "shardwise/sim/collective_cost.hpp"
#include "shardwise/sim/presets.hpp"
#include "shardwise/sim/sim_gpu.hpp"

namespace {

using namespace shardwise;

constexpr int ranks = 4;
// Blocks of m/2 x k/2 and k/2 x n/2: panels of 4 MiB, products that outlast their broadcasts.
constexpr std::int64_t m = 4096, k = 1024, n = 4096;
constexpr double element = sizeof(float);
constexpr double panel_bytes = m / 2 * k / 2 * element;  // A's block, and B's (k/2 x n/2)

// form(a, b, c, options) twice on the grid (the first grows the workspace); the second's time, from a
// moment every rank shares to the slowest rank's last kernel.
template <class Form>
double modelled(summa_broadcasts when, Form&& form) {
  std::vector<double> elapsed(ranks);
  sim_gpu::run(
      ranks, sim::presets::mi210_nodes(ranks, ranks),
      [&](sim_gpu::communicator& world) {
        world.use_stream(world.device().create_stream("communication"));
        process_mesh mesh(world, {2, 2});
        const dtensor<float, block_2d<>, decltype(mesh)> a(mesh, {m, k}), b(mesh, {k, n}), c(mesh, {m, n});
        (void)form(a, b, c, matmul_options{.summa = when});
        world.device().synchronize();
        world.barrier();
        const double start = world.now();
        (void)form(a, b, c, matmul_options{.summa = when});
        world.device().synchronize();
        elapsed[static_cast<std::size_t>(world.rank())] = world.now() - start;
      },
      sim_gpu::execution::shapes_only);
  return *std::max_element(elapsed.begin(), elapsed.end());
}

struct pieces {
  double copy, broadcast, product;
};

pieces pieces_of(const sim::machine& machine) {
  sim::collective_cost costs(machine);
  const std::vector<int> pair{0, 1};  // every pair of the node is alike
  const double flops = 2.0 * (m / 2) * (n / 2) * (k / 2);
  return {machine.device.duration(copy_work(panel_bytes)),
          costs.duration(costs.group_id(pair), pair, {sim::collective::broadcast, panel_bytes, 0}),
          machine.device.duration({.flops = flops,
                                   .bytes = element * ((m / 2) * (k / 2) + (k / 2) * (n / 2) + (m / 2) * (n / 2)),
                                   .float_product_flops = flops})};
}

struct both_forms {
  pieces p;
  double ahead, in_turn;
};

// form's modelled times both ways; in turn takes one copy and one broadcast longer.
template <class Form>
both_forms expect_broadcasts_ahead_hide_behind_products(Form&& form) {
  const pieces p = pieces_of(sim::presets::mi210_nodes(ranks, ranks));
  EXPECT_GT(p.product, p.copy + p.broadcast);
  const double ahead = modelled(summa_broadcasts::ahead, form);
  const double in_turn = modelled(summa_broadcasts::in_turn, form);
  EXPECT_NEAR(in_turn - ahead, p.copy + p.broadcast, 1e-3 * (p.copy + p.broadcast))
      << "ahead " << ahead << " s, in turn " << in_turn << " s";
  return {p, ahead, in_turn};
}

TEST(summa_time, product_of_a_and_b_takes_each_later_broadcast_during_the_product_before) {
  const auto [p, ahead, in_turn] = expect_broadcasts_ahead_hide_behind_products(
      [](const auto& a, const auto& b, const auto&, matmul_options o) { return matmul(a, b, o); });
  const double predicted_ahead = 2 * p.copy + p.broadcast + 2 * p.product;
  const double predicted_in_turn = 3 * p.copy + 2 * p.broadcast + 2 * p.product;
  EXPECT_NEAR(ahead, predicted_ahead, 1e-3 * predicted_ahead);
  EXPECT_NEAR(in_turn, predicted_in_turn, 1e-3 * predicted_in_turn);
}

TEST(summa_time, input_gradient_takes_each_later_broadcast_during_the_product_before) {
  expect_broadcasts_ahead_hide_behind_products(
      [](const auto&, const auto& b, const auto& c, matmul_options o) { return matmul(c, transposed(b), o); });
}

TEST(summa_time, weight_gradient_takes_each_later_broadcast_during_the_product_before) {
  expect_broadcasts_ahead_hide_behind_products(
      [](const auto& a, const auto&, const auto& c, matmul_options o) { return matmul(transposed(a), c, o); });
}

}  // namespace
