// The layer norm test's 3-D family on the shapes that do not divide the grid (padded and ragged layouts):
// its comparison with the serial layer norm (layer_norm_checks.hpp), compiled on its own.
#include "ops/layer_norm_checks.hpp"
#include "shardwise/layout/padding.hpp"
#include "support/backends.hpp"

namespace shardwise::ops_testing {

template void expect_family_matches_serial_layer_norm<3, padded, ragged>(
    shardwise::testing::backend::communicator_type&);

}  // namespace shardwise::ops_testing
