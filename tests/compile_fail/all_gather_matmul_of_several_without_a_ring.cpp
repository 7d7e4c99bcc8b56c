// Misuse: all_gather_matmul of x (rows cut over axis 0) with a tuple of right operands, one of which
// makes no 1-D product with x gathered (x itself: gather(x) times x, whose rows are cut too). The
// compiler must refuse it in words and point to the rules (EXPECT in tests/CMakeLists.txt).
#include <tuple>

#include "shardwise/comm/threads.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/ops/collective_matmul.hpp"

using mesh_1d = shardwise::process_mesh<shardwise::threads::communicator, 1>;

void misuse(mesh_1d& mesh) {
  const shardwise::dtensor<float, shardwise::col_1d<>, mesh_1d> x(mesh, {8, 8});
  const shardwise::dtensor<float, shardwise::row_1d<>, mesh_1d> w(mesh, {8, 8});
  auto products = shardwise::all_gather_matmul(x, std::tie(w, x));
  (void)products;
}
