// The C++ block of docs/sim-gpu.md, compiled but not run, with the page's own includes and nothing
// else: "sim_gpu_1.inc" is the page's block (shardwise_add_doc_blocks_check).
#include "shardwise/sim/sim_gpu.hpp"
#include "shardwise/sim/presets.hpp"

namespace doc_blocks {
// 1: a program's main(); the block's #include lines are this file's.
void block_1() {
#include "sim_gpu_1.inc"
}
}  // namespace doc_blocks
