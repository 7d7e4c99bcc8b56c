// The C++ blocks of docs/layouts.md, each given the names its prose takes as given, compiled but not
// run: "layouts_<n>.inc" is the page's n-th block (shardwise_add_doc_blocks_check).
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "shardwise/shardwise.hpp"

namespace doc_blocks {
using communicator = shardwise::threads::communicator;
using mesh_1d = shardwise::process_mesh<communicator, 1>;
template <class Layout>
using tensor_1d = shardwise::dtensor<float, Layout, mesh_1d>;

// 1: at namespace scope; the page writes cube_3d unqualified.
using shardwise::cube_3d;
#include "layouts_1.inc"

// 2: the user's layout my_layout (a library one stands in), a mesh and a tensor in that layout.
template <class my_layout>
void block_2(mesh_1d& mesh, const tensor_1d<my_layout>& tensor) {
#include "layouts_2.inc"
}
using stand_in = shardwise::row_1d<shardwise::ragged>;
template void block_2<stand_in>(mesh_1d&, const tensor_1d<stand_in>&);

// 3: a rank body's world.
void block_3(communicator& world) {
#include "layouts_3.inc"
}

// 4: h row_1d and v col_1d on a 1-D mesh.
void block_4(const tensor_1d<shardwise::row_1d<>>& h, const tensor_1d<shardwise::col_1d<>>& v) {
#include "layouts_4.inc"
}

// 5: a family's Input layout on its Mesh, the extents, and the user's table, token ids and lookup.
void add_owned_rows(const std::vector<float>& table, const std::vector<std::int32_t>& token_ids, auto& addend);
template <class Input, class Mesh>
void block_5(Mesh& mesh, std::int64_t tokens, std::int64_t hidden, const std::vector<float>& table,
             const std::vector<std::int32_t>& token_ids) {
#include "layouts_5.inc"
}
template void block_5<shardwise::col_1d<>>(mesh_1d&, std::int64_t, std::int64_t, const std::vector<float>&,
                                           const std::vector<std::int32_t>&);
}  // namespace doc_blocks
