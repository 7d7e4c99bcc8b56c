// The dtensor test's round trips and redistributions of its long list of layouts on 2-D meshes
// (dtensor_test.cpp, dtensor_checks.hpp), compiled on their own.
#define SHARDWISE_CHECK_LAYOUTS 1
#include "tensor/dtensor_checks.hpp"

#include "shardwise/layout/layout.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "support/backends.hpp"

namespace shardwise::testing {

template void check_layouts(process_mesh<backend::communicator_type, 2>&, const matrix_extents&, layouts_2d);

}  // namespace shardwise::testing
