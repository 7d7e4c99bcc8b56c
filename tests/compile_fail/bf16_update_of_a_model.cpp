// Misuse: an update with bf16 stored weights built from a model of float parameters, whose flat
// buffers it cannot keep. The compiler must say which update a model takes (EXPECT in
// tests/CMakeLists.txt): a bf16 model's (model::gpt<bf16, ...>) takes this one.
#include "shardwise/comm/threads.hpp"
#include "shardwise/core/bf16.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/nn/family.hpp"
#include "shardwise/nn/mlp.hpp"
#include "shardwise/optim/adam.hpp"
#include "shardwise/optim/sharded.hpp"

void misuse(shardwise::threads::communicator& world) {
  shardwise::process_mesh mesh(world, {world.size()});
  shardwise::nn::mlp<float, shardwise::nn::tensor_parallel_1d<>, decltype(mesh)> model(mesh, 8, 32, 5);
  auto replicas = world.split(world.rank(), 0);
  shardwise::optim::sharded_update<shardwise::optim::adam, shardwise::bf16> update(model, replicas);
}
