// Misuse: matmul_reduce_scatter of the sum of two products whose operands' padding rules differ, so
// that their sums would be reduce-scattered into different layouts (col_1d<exact> and col_1d<padded>).
// The compiler must refuse it in words (EXPECT in tests/CMakeLists.txt).
#include <tuple>

#include "shardwise/comm/threads.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/ops/collective_matmul.hpp"

using mesh_1d = shardwise::process_mesh<shardwise::threads::communicator, 1>;

void misuse(mesh_1d& mesh) {
  const shardwise::dtensor<float, shardwise::row_1d<>, mesh_1d> h(mesh, {8, 8});
  const shardwise::dtensor<float, shardwise::col_1d<>, mesh_1d> v(mesh, {8, 8});
  const shardwise::dtensor<float, shardwise::row_1d<shardwise::padded>, mesh_1d> h_padded(mesh, {8, 8});
  const shardwise::dtensor<float, shardwise::col_1d<shardwise::padded>, mesh_1d> v_padded(mesh, {8, 8});
  auto z = shardwise::matmul_reduce_scatter(std::tie(h, h_padded), std::tie(v, v_padded));
  (void)z;
}
