// The collective matmul test's 3-D products pipelined in bands on the ragged cube, shapes that do not
// divide (collective_matmul_checks.hpp), compiled on their own.
#include "ops/collective_matmul_checks.hpp"
#include "shardwise/layout/cube_3d.hpp"

namespace shardwise::testing {

template void check_pipelined_forms<cube_3d<directions<0, 2, 1>, ragged>>(mesh_3d&, const product_shape&, int,
                                                                          const operands&);

}  // namespace shardwise::testing
