// The model checkpoint test's 2-D family: a checkpoint loaded in its model (model_checkpoint_checks.hpp),
// compiled on its own.
#include <filesystem>

#include "optim/model_checkpoint_checks.hpp"
#include "shardwise/mesh/shape.hpp"
#include "shardwise/nn/family.hpp"
#include "support/backends.hpp"

namespace shardwise::testing {

template void expect_resumes_elsewhere<nn::tensor_parallel_2d<padded>>(backend::communicator_type&,
                                                                       const std::filesystem::path&,
                                                                       const global_state&, const global_state&, int,
                                                                       const coordinates<2>&);

}  // namespace shardwise::testing
