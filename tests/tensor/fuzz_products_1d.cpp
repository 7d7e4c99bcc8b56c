// The layout fuzz test's products on meshes of 1 dimension, and the drawing of those cases (which deduces
// the products' layouts) (fuzz_cases.hpp), compiled on their own.
#include "tensor/fuzz_cases.hpp"

namespace shardwise::testing::fuzz {

template void draw_on<1>(generator&, fuzz_case&);
template void run_product<1>(fuzz_mesh<1>&, const fuzz_case&);

}  // namespace shardwise::testing::fuzz
