#pragma once
// Memory every rank of a communicator reaches with plain loads and stores: each rank's block, and every
// rank's address for it. Threads share one address space; MPI ranks on one node map one segment (an
// MPI-3 shared-memory window, comm/mpi.hpp). It is what NVSHMEM and roc_shmem give GPUs joined by
// NVLink or xGMI, for the zero-copy stores of comm/shared/symmetric_window.hpp.
//
// A backend that has it provides, found by argument-dependent lookup:
//   shared_memory_groups(comm) for every rank of comm, the lowest rank whose memory it reaches (its
//                              node's first rank, for MPI): ranks with the same entry share memory
//                              (collective)
//   share_memory(comm, bytes)  this rank's block of `bytes` (sizes may differ), or nothing where the
//                              ranks do not all share memory (collective)
#include <cstddef>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "shardwise/core/checked_index.hpp"

namespace shardwise {

class shared_memory {
 public:
  // `blocks`: every rank's block, as this rank addresses it; `release` lets go of them: for MPI a
  // collective that frees this rank's block (every rank destroys its shared_memory in the same order;
  // a rank unwinding an error frees nothing, its job about to be aborted), for threads this rank's hold
  // on every block, each freed by the last rank to let go of it.
  shared_memory(std::vector<std::span<std::byte>> blocks, int rank, int world_rank, std::function<void()> release)
      : blocks_(std::move(blocks)), rank_(rank), world_rank_(world_rank), release_(std::move(release)) {}
  shared_memory(shared_memory&& other) noexcept
      : blocks_(std::move(other.blocks_)),
        rank_(other.rank_),
        world_rank_(other.world_rank_),
        release_(std::exchange(other.release_, {})) {}
  shared_memory& operator=(shared_memory&&) = delete;
  shared_memory(const shared_memory&) = delete;
  shared_memory& operator=(const shared_memory&) = delete;
  ~shared_memory() {
    if (release_) release_();
  }

  [[nodiscard]] std::span<std::byte> block(int rank) const {
    return element_at(blocks_, rank, world_rank_, "shared_memory::block", "rank");
  }
  [[nodiscard]] std::span<std::byte> local() const { return block(rank_); }

 private:
  std::vector<std::span<std::byte>> blocks_;
  int rank_;
  int world_rank_;
  std::function<void()> release_;
};

}  // namespace shardwise
