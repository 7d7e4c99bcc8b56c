#pragma once
// The machine a simulated run models: every GPU's device model, the network joining them and the
// collective algorithms it runs (presets for the papers' machines: sim/presets.hpp).
#include "shardwise/sim/algorithm_choice.hpp"
#include "shardwise/sim/device_model.hpp"
#include "shardwise/sim/topology.hpp"

namespace shardwise::sim {

struct machine {
  device_model device;
  sim::topology network;
  algorithm_choice algorithms{};
  bool record_timeline = false;  // keep a timeline of every kernel, collective and link
};

}  // namespace shardwise::sim
