// The C++ blocks of docs/tensor-parallel.md, each given the names its prose takes as given, compiled
// but not run: "tensor_parallel_<n>.inc" is the page's n-th block (shardwise_add_doc_blocks_check).
#include <cstdint>
#include <string>
#include <tuple>

#include "shardwise/shardwise.hpp"

namespace doc_blocks {
using communicator = shardwise::threads::communicator;
using mesh_1d = shardwise::process_mesh<communicator, 1>;
using mesh_3d = shardwise::process_mesh<communicator, 3>;
using col = shardwise::dtensor<float, shardwise::col_1d<>, mesh_1d>;
using row = shardwise::dtensor<float, shardwise::row_1d<>, mesh_1d>;
template <class Layout>
using tensor_3d = shardwise::dtensor<float, Layout, mesh_3d>;
using cube = shardwise::cube_3d<>;

// 1: operands a and b and the output's gradient dc (here the 3-D product's).
void block_1(const tensor_3d<cube::input>& a, const tensor_3d<cube::weight>& b, const tensor_3d<cube::output>& dc) {
#include "tensor_parallel_1.inc"
}

// 2: x col_1d, w row_1d; h row_1d, v col_1d, as the comments say.
void block_2(const col& x, const row& w, const row& h, const col& v) {
#include "tensor_parallel_2.inc"
}

// 3: h row_1d and v col_1d of the row-parallel product, the gradient dz of its col_1d output.
void block_3(const row& h, const col& v, const col& dz) {
#include "tensor_parallel_3.inc"
}

// 4: x col_1d, the weights wq, wk, wv row_1d, the gradients dq, dk, dv of their row_1d outputs.
void block_4(const col& x, const row& wq, const row& wk, const row& wv, const row& dq, const row& dk, const row& dv) {
#include "tensor_parallel_4.inc"
}

// 5-9 write the library's names unqualified, as in namespace shardwise.
// 5: a 1-D Mesh and a 3-D Mesh3, a seed.
void block_5(mesh_1d& mesh, mesh_3d& mesh3, std::uint64_t seed) {
  using namespace shardwise;
  using Mesh = mesh_1d;
  using Mesh3 = mesh_3d;
#include "tensor_parallel_5.inc"
}

// 6: x col_1d, w row_1d.
void block_6(const col& x, const row& w) {
  using namespace shardwise;
#include "tensor_parallel_6.inc"
}

// 7: a 1-D Mesh, a seed.
void block_7(mesh_1d& mesh, std::uint64_t seed) {
  using namespace shardwise;
  using Mesh = mesh_1d;
#include "tensor_parallel_7.inc"
}

// 8: a communicator of 4 ranks, world.
void block_8(communicator& world) {
  using namespace shardwise;
#include "tensor_parallel_8.inc"
}

// 9: a 1-D Mesh, a model's configuration.
void block_9(mesh_1d& mesh, const shardwise::model::gpt_config& config) {
  using namespace shardwise;
  using Mesh = mesh_1d;
#include "tensor_parallel_9.inc"
}
}  // namespace doc_blocks
