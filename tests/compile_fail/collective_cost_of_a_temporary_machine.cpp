// Misuse: a collective cost model built on a temporary machine, which it would keep a reference to
// after the machine is gone. The compiler must refuse, saying to name the machine.
#include <vector>

#include "shardwise/sim/collective_cost.hpp"
#include "shardwise/sim/presets.hpp"

double misuse() {
  shardwise::sim::collective_cost costs(shardwise::sim::presets::v100_nodes(8));
  const std::vector<int> devices{0, 1, 2, 3};
  return costs.duration(costs.group_id(devices), devices, {shardwise::collective::all_reduce, 1024, 0});
}
