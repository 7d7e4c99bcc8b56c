// The vector ops test's 3-D family on the shapes that do not divide the grid (padded and ragged layouts):
// its A + b and A ∘ b against serial Eigen (vector_ops_checks.hpp), compiled on their own.
#include "ops/vector_ops_checks.hpp"
#include "shardwise/layout/padding.hpp"
#include "support/backends.hpp"

namespace shardwise::ops_testing {

template void expect_family_matches_serial_vector_ops<3, padded, ragged>(
    shardwise::testing::backend::communicator_type&);

}  // namespace shardwise::ops_testing
