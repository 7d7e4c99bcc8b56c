// Misuse: a checkpoint of a model whose embedding tables hold doubles. Checkpoints hold float32, so
// the compiler must say so (EXPECT in tests/CMakeLists.txt), not that no function matches.
#include "shardwise/comm/threads.hpp"
#include "shardwise/optim/adamw.hpp"
#include "shardwise/optim/model_checkpoint.hpp"
#include "shardwise/optim/rowwise_adagrad.hpp"
#include "shardwise/optim/sharded.hpp"
#include "shardwise/optim/sparse_update.hpp"

using dense_update = shardwise::optim::sharded_update<shardwise::optim::adamw>;
using table_update = shardwise::optim::sparse_update<shardwise::optim::rowwise_adagrad, double>;

void misuse(const dense_update& dense, const table_update& tables, shardwise::threads::communicator& world) {
  shardwise::optim::save_model_checkpoint("checkpoints", dense, tables, world, world);
}
