// The dtensor test's round trips and redistributions of its long list of layouts on 3-D meshes
// (dtensor_3d_test.cpp, dtensor_checks.hpp), compiled on their own.
#define SHARDWISE_CHECK_LAYOUTS 1
#include "tensor/dtensor_checks.hpp"

#include "shardwise/layout/layout.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "support/backends.hpp"

namespace shardwise::testing {

template void check_layouts(process_mesh<backend::communicator_type, 3>&, const matrix_extents&, layouts_3d);

}  // namespace shardwise::testing
