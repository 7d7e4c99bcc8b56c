// The C++ blocks of docs/sim-gpu.md, compiled with the page's own includes and nothing else:
// "sim_gpu_<n>.inc" is the page's n-th block (shardwise_add_doc_blocks_check); the second runs, and a
// test checks it prints what the page says.
#include <cstdio>

#include "shardwise/shardwise.hpp"
#include "shardwise/sim/presets.hpp"
#include "shardwise/sim/sim_gpu.hpp"

namespace doc_blocks {
// 1: a program's main(); the block's #include lines are this file's.
void block_1() {
#include "sim_gpu_1.inc"
}

// 2: a program's main(), as the first.
void block_2() {
#include "sim_gpu_2.inc"
}
}  // namespace doc_blocks
