// The GPT test's sequence-parallel 1-D family in double and float: its comparisons with the model on
// one rank (gpt_checks.hpp), compiled on their own.
#include "model/gpt_checks.hpp"

namespace shardwise::testing {

template void expect_model_equals<double, gpt_family_sequence>(family_mesh<gpt_family_sequence>&,
                                                               backend::communicator_type&, std::int64_t, std::int64_t,
                                                               const gpt_results<double>&, double, nn::recomputation);
template void expect_model_equals<float, gpt_family_sequence>(family_mesh<gpt_family_sequence>&,
                                                              backend::communicator_type&, std::int64_t, std::int64_t,
                                                              const gpt_results<float>&, double, nn::recomputation);

}  // namespace shardwise::testing
