#pragma once
// The most element memory any rank of a communicator has held at once (core/element_memory.hpp, which
// every backend counts for each rank): what a training run reports beside its tokens/s, as torchtitan's
// metrics give the device's peak.
//
//   say("memory %.1f MiB\n", largest_memory_high_water(world) / double(1 << 20));
//
// Collective: one all-reduce of one integer. A rank outside any backend's run counts nothing: it adds 0.
#include <cstdint>
#include <span>

#include "shardwise/comm/communicator.hpp"
#include "shardwise/comm/reduction.hpp"
#include "shardwise/core/element_memory.hpp"

namespace shardwise {

template <communicator Comm>
[[nodiscard]] std::int64_t largest_memory_high_water(Comm& comm) {
  const element_memory* memory = element_memory::of_this_thread();
  std::int64_t bytes = memory == nullptr ? 0 : memory->high_water();
  comm.all_reduce(std::span<std::int64_t>(&bytes, 1), op::max);
  return bytes;
}

}  // namespace shardwise
