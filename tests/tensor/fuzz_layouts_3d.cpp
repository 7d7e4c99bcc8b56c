// The layout fuzz test's scatters, gathers and redistributions on meshes of 3 dimensions (fuzz_cases.hpp),
// compiled on their own.
#include "tensor/fuzz_cases.hpp"

namespace shardwise::testing::fuzz {

template void run_layouts<3>(fuzz_mesh<3>&, const fuzz_case&);

}  // namespace shardwise::testing::fuzz
