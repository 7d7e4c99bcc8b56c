// Misuse: a bias added to a temporary partial-sum tensor (a row-parallel product not yet reduced), whose
// blocks are addends still to be summed over mesh axis 1: the bias would count once per addend. The
// compiler must refuse it, in place as out of place, and say why (tests/CMakeLists.txt).
#include <utility>

#include "shardwise/comm/threads.hpp"
#include "shardwise/layout/partial_sum.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/layout/vector_layout.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/ops/add_vector.hpp"
#include "shardwise/tensor/dtensor.hpp"

using mesh_2d = shardwise::process_mesh<shardwise::threads::communicator, 2>;
using columns = shardwise::col_1d<>;

void misuse(mesh_2d& mesh) {
  shardwise::dtensor<float, shardwise::partial_sum<columns, 1>, mesh_2d> addends(mesh, {8, 8});
  const shardwise::dtensor<float, shardwise::vector_layout_t<columns>, mesh_2d> bias(mesh, {1, 8});
  auto biased = shardwise::add_vector(std::move(addends), bias);
  (void)biased;
}
