// The layout fuzz test's scatters, gathers and redistributions on meshes of 2 dimensions (fuzz_cases.hpp),
// compiled on their own.
#include "tensor/fuzz_cases.hpp"

namespace shardwise::testing::fuzz {

template void run_layouts<2>(fuzz_mesh<2>&, const fuzz_case&);

}  // namespace shardwise::testing::fuzz
