// Misuse: GeLU of a partial-sum tensor, whose blocks are addends still to be summed over mesh axis 1.
// The compiler must refuse it, name the layout in its first error, and say why (tests/CMakeLists.txt).
#include "shardwise/comm/threads.hpp"
#include "shardwise/layout/partial_sum.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/ops/gelu.hpp"
#include "shardwise/tensor/dtensor.hpp"

using mesh_2d = shardwise::process_mesh<shardwise::threads::communicator, 2>;

void misuse(mesh_2d& mesh) {
  const shardwise::dtensor<float, shardwise::partial_sum<shardwise::col_1d<>, 1>, mesh_2d> addends(mesh, {8, 8});
  auto activated = shardwise::gelu(addends);
  (void)activated;
}
