#pragma once
// What the shapes-only tests share: a program run on simulated MI210s in full and with shapes only,
// and the comparison of what the two runs report, or the rank's storage accounting in each.
#include <gtest/gtest.h>

#include <cstddef>
#include <string>

#include "shardwise/core/element_memory.hpp"
#include "shardwise/sim/presets.hpp"
#include "shardwise/sim/sim_gpu.hpp"

namespace shardwise::testing {

// `body` on `ranks` simulated MI210s (nodes of `gpus_per_node`), with every value and with shapes
// only: every rank finishes at the same virtual time to 1e-9 relative, with the same traffic and the
// same high-water mark of element storage; and the program took time.
template <class Body>
void expect_same_costs(int ranks, Body body, int gpus_per_node = 4) {
  const auto machine = sim::presets::mi210_nodes(ranks, gpus_per_node);
  const auto full = sim_gpu::run(ranks, machine, body, sim_gpu::execution::full);
  const auto shapes = sim_gpu::run(ranks, machine, body, sim_gpu::execution::shapes_only);
  ASSERT_EQ(shapes.finish_times.size(), full.finish_times.size());
  for (std::size_t r = 0; r < full.finish_times.size(); ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_GT(full.finish_times[r], 0.0);
    EXPECT_NEAR(shapes.finish_times[r], full.finish_times[r], 1e-9 * full.finish_times[r]);
    EXPECT_EQ(shapes.traffic[r], full.traffic[r])
        << to_string(shapes.traffic[r]) << " against " << to_string(full.traffic[r]);
    EXPECT_EQ(shapes.memory_high_water[r], full.memory_high_water[r]);
  }
}

// Runs body(world, memory) on 2 simulated GPUs, with values and with shapes only; `memory` is the
// rank's storage accounting.
template <class Body>
void on_two_gpus_in_both_modes(Body body) {
  for (const auto how : {sim_gpu::execution::full, sim_gpu::execution::shapes_only})
    sim_gpu::run(
        2, sim::presets::mi210_nodes(2, 2),
        [&](sim_gpu::communicator& world) { body(world, *element_memory::of_this_thread()); }, how);
}

}  // namespace shardwise::testing
