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
  // A collective on a group is priced as run at the same moment by every translate of the group that
  // tiles the machine (the other groups of a mesh axis, which an SPMD program drives alike), their
  // transfers sharing the links: the four GPUs of a node on four different groups of an axis cross
  // the node's one NIC together. False: each group priced alone on the network.
  bool axis_groups_share_links = true;
  bool record_timeline = false;  // keep a timeline of every kernel, collective and link
};

}  // namespace shardwise::sim
