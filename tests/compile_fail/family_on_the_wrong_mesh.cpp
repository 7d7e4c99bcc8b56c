// Misuse: the 3-D family's layers on a 2-D mesh. The compiler must refuse in words.
#include "shardwise/comm/threads.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/nn/mlp.hpp"

using mesh_2d = shardwise::process_mesh<shardwise::threads::communicator, 2>;

void misuse(mesh_2d& mesh) {
  shardwise::nn::mlp<float, shardwise::nn::tensor_parallel_3d<>, mesh_2d> layer(mesh, 8, 32, 1);
}
