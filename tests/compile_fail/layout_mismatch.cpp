// Misuse: a tensor of one layout passed where another layout is required. The compiler must refuse it
// in words, and its message must name both layouts (EXPECT in tests/CMakeLists.txt).
#include "shardwise/comm/threads.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/tensor/dtensor.hpp"

using mesh_1d = shardwise::process_mesh<shardwise::threads::communicator, 1>;

void needs_columns_cut(const shardwise::dtensor<float, shardwise::row_1d<>, mesh_1d>&) {}

void misuse(mesh_1d& mesh) {
  const shardwise::dtensor<float, shardwise::col_1d<>, mesh_1d> rows_cut(mesh, {8, 8});
  needs_columns_cut(rows_cut);
}
