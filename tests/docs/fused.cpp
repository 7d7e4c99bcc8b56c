// The C++ block of docs/fused.md, given the names its prose takes as given, compiled but not run:
// "fused_1.inc" is the page's block (shardwise_add_doc_blocks_check).
#include <span>

#include "shardwise/shardwise.hpp"

namespace doc_blocks {
namespace fused = shardwise::fused;

// 1: a rank's communicator, its tables and its bags of lookups (the page writes fused:: unqualified).
void block_1(shardwise::threads::communicator& comm, std::span<const std::span<const float>> my_tables,
             std::span<const fused::embedding_bags> my_bags) {
#include "fused_1.inc"
  (void)out;
}
}  // namespace doc_blocks
