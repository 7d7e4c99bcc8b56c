// The layout fuzz test's products on meshes of 3 dimensions, and the drawing of those cases (which deduces
// the products' layouts) (fuzz_cases.hpp), compiled on their own.
#include "tensor/fuzz_cases.hpp"

namespace shardwise::testing::fuzz {

template void draw_on<3>(generator&, fuzz_case&);
template void run_product<3>(fuzz_mesh<3>&, const fuzz_case&);

}  // namespace shardwise::testing::fuzz
