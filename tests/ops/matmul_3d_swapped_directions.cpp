// The 3-D product test's comparisons with Eigen in the swapped directions (cube_3d<>::swapped) for every
// padding rule (matmul_3d_checks.hpp), compiled on their own.
#include "ops/matmul_3d_checks.hpp"
#include "shardwise/layout/cube_3d.hpp"

namespace shardwise::testing {

template void check_every_padding<directions<2, 0, 1>>(mesh_3d&);

}  // namespace shardwise::testing
