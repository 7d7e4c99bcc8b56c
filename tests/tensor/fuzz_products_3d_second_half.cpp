// The layout fuzz test's products on meshes of 3 dimensions in the second half of the catalogue's forms
// (fuzz_cases.hpp), compiled on their own.
#include "tensor/fuzz_cases.hpp"

namespace shardwise::testing::fuzz {

template void run_product<3, 1>(fuzz_mesh<3>&, const fuzz_case&);

}  // namespace shardwise::testing::fuzz
