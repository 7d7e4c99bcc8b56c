// The model update test's 3-D family: its GPT trained with LAMB and with LARS (model_update_checks.hpp),
// compiled on its own.
#include "optim/model_update_checks.hpp"
#include "shardwise/layout/cube_3d.hpp"
#include "shardwise/mesh/shape.hpp"
#include "shardwise/nn/family.hpp"
#include "shardwise/optim/lamb.hpp"
#include "shardwise/optim/lars.hpp"
#include "support/backends.hpp"

namespace shardwise::testing {

template trained train_gpt<nn::tensor_parallel_3d<directions<>, padded>>(backend::communicator_type&, int,
                                                                         const coordinates<3>&, optim::lamb,
                                                                         gradient_reduction);
template trained train_gpt<nn::tensor_parallel_3d<directions<>, padded>>(backend::communicator_type&, int,
                                                                         const coordinates<3>&, optim::lars,
                                                                         gradient_reduction);

}  // namespace shardwise::testing
