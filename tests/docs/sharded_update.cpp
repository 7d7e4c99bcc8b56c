// The C++ blocks of docs/sharded-update.md, each given the names its prose takes as given, compiled but
// not run: "sharded_update_<n>.inc" is the page's n-th block (shardwise_add_doc_blocks_check).
#include <span>
#include <vector>

// 1: at file scope, with the includes it writes and nothing of the library before them; the user's
// initial weights and forward and backward pass.
extern const std::vector<float> w0, b0;
void forward_backward(std::span<const float> w, std::span<const float> b, std::span<float> dw, std::span<float> db);
#include "sharded_update_1.inc"

#include "shardwise/shardwise.hpp"

namespace doc_blocks {
using communicator = shardwise::threads::communicator;
using dp_mesh = shardwise::data_parallel_mesh<communicator, 1>;
using gpt = shardwise::model::gpt<float, shardwise::nn::tensor_parallel_1d<>, shardwise::process_mesh<communicator, 1>>;

// 1: its rank body, on threads.
void block_1(communicator& comm) { body(comm); }

// 2: a model that names its parameters, on a data-parallel mesh; a learning rate.
void block_2(gpt& model, dp_mesh& mesh, float lr) {
#include "sharded_update_2.inc"
  (void)report;
}

// 3: the same.
void block_3(gpt& model, dp_mesh& mesh, float lr) {
#include "sharded_update_3.inc"
  (void)report;
}

// 4: the world, the group size S, the parameters' shapes and a learning rate.
void block_4(communicator& world, int S, const std::vector<optim::parameter_shape>& shapes, float lr) {
#include "sharded_update_4.inc"
}

// 5: a communicator, an update to save and another to load into.
void block_5(communicator& comm, const optim::sharded_update<optim::adam>& update,
             optim::replicated_update<optim::adam>& other) {
#include "sharded_update_5.inc"
}
}  // namespace doc_blocks
