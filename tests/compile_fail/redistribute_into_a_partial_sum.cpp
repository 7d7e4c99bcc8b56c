// Misuse: redistributing a final tensor into a partial-sum layout, which would pass its values off as
// addends (summed, each would count once per rank along the pending axis). redistribute takes partial
// sums out into final layouts, never in; the compiler must refuse it in words (EXPECT in
// tests/CMakeLists.txt).
#include "shardwise/comm/threads.hpp"
#include "shardwise/layout/partial_sum.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/tensor/distribute.hpp"

using mesh_2d = shardwise::process_mesh<shardwise::threads::communicator, 2>;

void misuse(mesh_2d& mesh) {
  const shardwise::dtensor<float, shardwise::col_1d<>, mesh_2d> sums(mesh, {8, 8});
  auto addends = shardwise::redistribute<shardwise::partial_sum<shardwise::col_1d<>, 1>>(sums);
  (void)addends;
}
