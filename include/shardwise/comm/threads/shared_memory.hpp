#pragma once
// comm/shared_memory.hpp for the threads backend: threads share one address space, so every
// rank's block is on the heap and the ranks exchange its address.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "shardwise/comm/shared_memory.hpp"
#include "shardwise/comm/threads/communicator.hpp"
#include "shardwise/core/huge_pages.hpp"

namespace shardwise::threads {

[[nodiscard]] inline std::vector<int> shared_memory_groups(const communicator& comm) {
  return std::vector<int>(static_cast<std::size_t>(comm.size()), 0);
}

[[nodiscard]] inline std::optional<shared_memory> share_memory(communicator& comm, std::size_t bytes) {
  // Cache-line aligned (no false sharing with the neighbouring allocation), on huge pages when large:
  // peers write into it row by row, far apart.
  const std::shared_ptr<std::byte> mine(static_cast<std::byte*>(allocate_huge_pages(bytes)),
                                        [bytes](std::byte* block) { deallocate_huge_pages(block, bytes); });
  const std::int64_t here[3] = {static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(mine.get())),
                                static_cast<std::int64_t>(bytes),
                                static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(&mine))};
  std::vector<std::int64_t> all(3 * static_cast<std::size_t>(comm.size()));
  comm.all_gather(std::span<const std::int64_t>(here, 3), all);
  // Every rank owns every block: a rank may still be raising a flag in a peer's block after the peer saw
  // it raised, so a block goes with the last rank that reaches it, whether that rank is done or
  // unwinding an error, and no rank waits for another to free it.
  std::vector<std::span<std::byte>> blocks;
  std::vector<std::shared_ptr<std::byte>> owners;
  blocks.reserve(static_cast<std::size_t>(comm.size()));
  owners.reserve(static_cast<std::size_t>(comm.size()));
  for (std::size_t p = 0; p < all.size(); p += 3) {
    blocks.emplace_back(reinterpret_cast<std::byte*>(static_cast<std::uintptr_t>(all[p])),
                        static_cast<std::size_t>(all[p + 1]));
    owners.push_back(*reinterpret_cast<const std::shared_ptr<std::byte>*>(static_cast<std::uintptr_t>(all[p + 2])));
  }
  comm.barrier();  // every peer has taken its share of `mine` before it leaves this rank's stack
  return shared_memory(std::move(blocks), comm.rank(), comm.world_rank(),
                       [owners = std::move(owners)]() mutable { owners.clear(); });
}

}  // namespace shardwise::threads
