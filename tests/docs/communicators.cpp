// The C++ blocks of docs/communicators.md, each given the names its prose takes as given, compiled but
// not run: "communicators_<n>.inc" is the page's n-th block (shardwise_add_doc_blocks_check).
#include <iostream>
#include <vector>

#include "shardwise/comm/algorithms/collectives.hpp"
#include "shardwise/comm/mpi.hpp"
#include "shardwise/shardwise.hpp"

namespace doc_blocks {
using communicator = shardwise::threads::communicator;
using mesh_3d = shardwise::process_mesh<communicator, 3>;
template <class Layout>
using tensor_3d = shardwise::dtensor<float, Layout, mesh_3d>;

std::vector<float> local_gradient(int rank);  // the user's

// 1: a program's main(argc, argv) and the user's local_gradient.
void block_1(int argc, char** argv) {
#include "communicators_1.inc"
}

// 2: a 3-D product's operands a and b on a 2x2x2 mesh.
void block_2(mesh_3d& mesh, const tensor_3d<shardwise::cube_3d<>::input>& a,
             const tensor_3d<shardwise::cube_3d<>::weight>& b) {
#include "communicators_2.inc"
  (void)c;
}

// 3: a rank body; the page writes element_memory unqualified. It reads the counts without using them.
void block_3() {
  using shardwise::element_memory;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-result"
#include "communicators_3.inc"
#pragma GCC diagnostic pop
}

// 4: any communicator comm and the buffers the calls name; the block's #include is this file's.
void block_4(communicator& comm) {
  std::vector<float> gradients, sums, whole, block;
  std::vector<int> in, out;
  std::vector<double> data;
#include "communicators_4.inc"
}

// 5: a rank body's world, and buffers for a block of A and its row.
void block_5(communicator& world, std::vector<float>& a_block, std::vector<float>& a_row) {
#include "communicators_5.inc"
  (void)i, (void)j, (void)l;
}
}  // namespace doc_blocks
