// The sequence-parallel 1-D family's comparison with the serial block (transformer_block_checks.hpp),
// compiled on its own.
#include "nn/transformer_block_checks.hpp"

namespace shardwise::testing {

template void check_family<nn::sequence_parallel_1d<padded>>(family_mesh<nn::sequence_parallel_1d<padded>>&,
                                                             const nn::block_options&, std::int64_t,
                                                             const std::string&);

}  // namespace shardwise::testing
