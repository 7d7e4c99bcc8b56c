// The GPT test's 2-D family in float: its comparison with the model on one rank (gpt_checks.hpp),
// compiled on its own.
#include "model/gpt_checks.hpp"

namespace shardwise::testing {

template void expect_model_equals<float, gpt_family_2d>(family_mesh<gpt_family_2d>&, backend::communicator_type&,
                                                        std::int64_t, std::int64_t, const gpt_results<float>&, double,
                                                        nn::recomputation);

}  // namespace shardwise::testing
