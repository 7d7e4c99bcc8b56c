#pragma once
// The GPU-initiated primitives the fused operators are built from, named in this one place: a
// symmetric window over the ranks that share memory (puts, zero-copy stores, fences, signals), epoch
// flags, the done-bitmask of a slice's tasks, and the modelled persistent kernel and queue of
// GPU-initiated messages. The runtime's pieces (comm/shared/) are in namespace shardwise; the models of
// time (sim/) are named here for the fused operators.
#include "shardwise/comm/shared/done_bitmask.hpp"
#include "shardwise/comm/shared/epoch_flags.hpp"
#include "shardwise/comm/shared/symmetric_window.hpp"
#include "shardwise/sim/message_queue.hpp"
#include "shardwise/sim/persistent_kernel.hpp"

namespace shardwise::fused {

using sim::crosses_nodes;
using sim::deliver_all;
using sim::gpu_message;
using sim::persistent_kernel;

}  // namespace shardwise::fused
