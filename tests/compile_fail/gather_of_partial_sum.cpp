// Misuse: gathering a partial-sum tensor as if it were final, which would return one addend for the
// sum. The compiler must refuse it in words (EXPECT in tests/CMakeLists.txt).
#include "shardwise/comm/threads.hpp"
#include "shardwise/layout/partial_sum.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/tensor/distribute.hpp"

using mesh_2d = shardwise::process_mesh<shardwise::threads::communicator, 2>;

void misuse(mesh_2d& mesh) {
  const shardwise::dtensor<float, shardwise::partial_sum<shardwise::col_1d<>, 1>, mesh_2d> addends(mesh, {8, 8});
  auto whole = shardwise::gather(addends, 0);
  (void)whole;
}
