// The 3-D family's comparison with the serial block (transformer_block_checks.hpp), compiled on its own.
#include "nn/transformer_block_checks.hpp"

namespace shardwise::testing {

template void check_family<nn::tensor_parallel_3d<>>(family_mesh<nn::tensor_parallel_3d<>>&, const nn::block_options&,
                                                     std::int64_t, const std::string&);

}  // namespace shardwise::testing
