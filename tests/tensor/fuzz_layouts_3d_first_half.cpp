// The layout fuzz test's scatters, gathers and redistributions on meshes of 3 dimensions, for cases whose
// first layout is in the first half of the catalogue (fuzz_cases.hpp), compiled on their own.
#include "tensor/fuzz_cases.hpp"

namespace shardwise::testing::fuzz {

template void run_layouts<3, 0>(fuzz_mesh<3>&, const fuzz_case&);

}  // namespace shardwise::testing::fuzz
