// Misuse: a 3-D Transformer block fed a tensor in the cube's output layout (what a first linear
// returns) instead of its input layout. Blocks stack only input to input; the compiler must refuse,
// naming both layouts on its first error line (FIRST_ERROR in tests/CMakeLists.txt).
#include "shardwise/comm/threads.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/nn/transformer_block.hpp"

using mesh_3d = shardwise::process_mesh<shardwise::threads::communicator, 3>;
using family = shardwise::nn::tensor_parallel_3d<>;

void misuse(mesh_3d& mesh, shardwise::nn::transformer_block<float, family, mesh_3d>& block) {
  const shardwise::dtensor<float, family::hidden, mesh_3d> swapped(mesh, {8, 8});
  (void)block.forward(swapped);
}
