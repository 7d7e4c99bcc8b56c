#pragma once
// comm/shared_memory.hpp for the threads backend: threads share one address space, so every
// rank's block is on the heap and the ranks exchange its address.
#include <cstddef>
#include <cstdint>
#include <exception>
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
  const auto release = [bytes](std::byte* block) { deallocate_huge_pages(block, bytes); };
  std::unique_ptr<std::byte, decltype(release)> mine(static_cast<std::byte*>(allocate_huge_pages(bytes)), release);
  const std::int64_t here[2] = {static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(mine.get())),
                                static_cast<std::int64_t>(bytes)};
  std::vector<std::int64_t> all(2 * static_cast<std::size_t>(comm.size()));
  comm.all_gather(std::span<const std::int64_t>(here, 2), all);
  std::vector<std::span<std::byte>> blocks;
  for (std::size_t p = 0; p < all.size(); p += 2)
    blocks.emplace_back(reinterpret_cast<std::byte*>(static_cast<std::uintptr_t>(all[p])),
                        static_cast<std::size_t>(all[p + 1]));
  // Freeing is collective, as MPI_Win_free is: a rank may still be raising a flag in a peer's block after
  // the peer saw it raised, so no block goes before every rank is done with all of them. The barrier is
  // on a communicator of the memory's own, split now while every rank is here. A rank unwinding an
  // error does not wait for peers that may never come, and after a failure the barrier throws: either
  // way the block is left allocated rather than freed under a peer.
  auto group = std::make_shared<communicator>(comm.split(0, comm.rank()));
  return shared_memory(std::move(blocks), comm.rank(), [block = mine.release(), release, group] {
    if (std::uncaught_exceptions() > 0) return;
    try {
      group->barrier();
    } catch (...) {
      return;
    }
    release(block);
  });
}

}  // namespace shardwise::threads
