// The 3-D product test's comparisons with Eigen in the third choice of directions, directions<0, 2, 1>,
// for every padding rule (matmul_3d_checks.hpp), compiled on their own.
#include "ops/matmul_3d_checks.hpp"
#include "shardwise/layout/cube_3d.hpp"

namespace shardwise::testing {

template void check_every_padding<directions<0, 2, 1>>(mesh_3d&);

}  // namespace shardwise::testing
