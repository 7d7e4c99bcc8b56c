// The layer norm test's 2-D family, and its 3-D family on the shape that divides the grid (exact layouts):
// their comparisons with the serial layer norm (layer_norm_checks.hpp), compiled on their own.
#include "ops/layer_norm_checks.hpp"
#include "shardwise/layout/padding.hpp"
#include "support/backends.hpp"

namespace shardwise::ops_testing {

template void expect_family_matches_serial_layer_norm<2>(shardwise::testing::backend::communicator_type&);
template void expect_family_matches_serial_layer_norm<3, exact>(shardwise::testing::backend::communicator_type&);

}  // namespace shardwise::ops_testing
