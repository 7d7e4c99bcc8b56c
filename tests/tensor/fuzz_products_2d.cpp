// The layout fuzz test's products on meshes of 2 dimensions, and the drawing of those cases (which deduces
// the products' layouts) (fuzz_cases.hpp), compiled on their own.
#include "tensor/fuzz_cases.hpp"

namespace shardwise::testing::fuzz {

template void draw_on<2>(generator&, fuzz_case&);
template void run_product<2>(fuzz_mesh<2>&, const fuzz_case&);

}  // namespace shardwise::testing::fuzz
