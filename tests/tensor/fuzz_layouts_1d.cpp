// The layout fuzz test's scatters, gathers and redistributions on meshes of 1 dimension (fuzz_cases.hpp),
// compiled on their own.
#include "tensor/fuzz_cases.hpp"

namespace shardwise::testing::fuzz {

template void run_layouts<1>(fuzz_mesh<1>&, const fuzz_case&);

}  // namespace shardwise::testing::fuzz
