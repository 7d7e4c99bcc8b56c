// The GPT test's 2-D family in bf16: its comparison with the model on one rank (gpt_checks.hpp,
// gpt_1d_bf16_test.cpp), compiled on its own.
#include "model/gpt_checks.hpp"

namespace shardwise::testing {

template void expect_model_equals<bf16, gpt_family_2d>(family_mesh<gpt_family_2d>&, backend::communicator_type&,
                                                       std::int64_t, std::int64_t, const gpt_results<bf16>&, double,
                                                       nn::recomputation);

}  // namespace shardwise::testing
