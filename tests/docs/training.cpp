// The C++ blocks of docs/training.md, each given the names its prose takes as given, compiled but not
// run: "training_<n>.inc" is the page's n-th block (shardwise_add_doc_blocks_check).
#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

#include "shardwise/comm/mpi.hpp"
#include "shardwise/shardwise.hpp"

namespace doc_blocks {
// The page writes the library's namespaces by their last names.
namespace model = shardwise::model;
namespace nn = shardwise::nn;
namespace optim = shardwise::optim;
using shardwise::bf16;

using communicator = shardwise::threads::communicator;
using dp_mesh = shardwise::data_parallel_mesh<communicator, 1>;
using tp_mesh = shardwise::process_mesh<communicator, 1>;
using gpt = model::gpt<float, nn::tensor_parallel_1d<>, tp_mesh>;

// 1: a rank body's world.
void block_1(communicator& world) {
#include "training_1.inc"
  (void)data, (void)grid;
}

// 2: a model. The block's lambda leaves its body out.
void block_2(gpt& model) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include "training_2.inc"
#pragma GCC diagnostic pop
}

// 3: a model, a validation batch's tokens and targets, the loss to set.
void block_3(gpt& model, const std::vector<std::int32_t>& tokens, const std::vector<std::int32_t>& targets,
             double& validation_loss) {
#include "training_3.inc"
}

// 4: any Family on its Mesh.
template <class Family, class Mesh>
void block_4(Mesh& mesh) {
#include "training_4.inc"
}
template void block_4<nn::tensor_parallel_1d<>>(tp_mesh&);

// 5: a data-parallel mesh, a model's configuration.
void block_5(dp_mesh& mesh, const model::gpt_config& config) {
#include "training_5.inc"
}

// 6: a model on a data-parallel mesh, the user's choice of what decays, the optimizer without decay,
// a schedule, the step and its batch.
bool decays(const std::string& name);
void block_6(gpt& model, dp_mesh& mesh, const optim::adamw& no_decay, const optim::warmup_cosine& schedule, long step,
             const shardwise::data::token_batch& batch) {
#include "training_6.inc"
  (void)loss, (void)report;
}

// 7: the checkpoint's folder, a model and its update, the data-parallel mesh and every rank's world.
void block_7(const std::filesystem::path& dir, gpt& model, optim::sharded_update<optim::adamw>& update, dp_mesh& mesh,
             communicator& world) {
#include "training_7.inc"
}

// 8: main(argc, argv), the number of threads and the rank body.
void block_8(int argc, char** argv, int ranks) {
  const auto body = [](shardwise::communicator auto& world) { (void)world; };
#include "training_8.inc"
}
}  // namespace doc_blocks
