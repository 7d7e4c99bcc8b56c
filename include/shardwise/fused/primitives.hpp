#pragma once
// The GPU-initiated primitives the fused operators are built from, named in this one place: a
// symmetric window over the ranks that share memory (puts, zero-copy stores, fences, signals), epoch
// flags, the done-bitmask of a slice's tasks, and the modelled persistent kernel and queue of
// GPU-initiated messages. The fused operators reach them through these names only, so where the
// primitives live is a matter of this header.
#include "shardwise/sim/done_bitmask.hpp"
#include "shardwise/sim/epoch_flags.hpp"
#include "shardwise/sim/message_queue.hpp"
#include "shardwise/sim/persistent_kernel.hpp"
#include "shardwise/sim/symmetric_window.hpp"

namespace shardwise::fused {

using sim::crosses_nodes;
using sim::deliver_all;
using sim::done_bitmask;
using sim::gpu_message;
using sim::persistent_kernel;
using sim::shared_memory_groups_of;
using sim::symmetric_window;
using sim::tasks_run;

}  // namespace shardwise::fused
