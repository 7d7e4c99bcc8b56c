#pragma once
// GPU-initiated communication between ranks that share memory (threads, MPI ranks on one node, and the
// data of the sim_gpu backend): every rank has a buffer and a set of epoch flags (comm/shared/epoch_flags.hpp)
// in memory its peers can reach (comm/shared_memory.hpp), and from creation on a rank reaches its
// peers' memory directly — what roc_shmem_ptr / NVSHMEM give a kernel on peers joined by xGMI or NVLink.
//
//   put(peer, offset, data)   stores into the peer's buffer
//   peer_buffer(peer)         the peer's buffer itself, for zero-copy stores as results are computed
//   fence()                   orders the stores before it ahead of the signals after it
//   signal(peer, flag, e)     raises the peer's flag to epoch e
//   wait(flag, e, deadline)   blocks until this rank's own flag reaches epoch e
// Creating a window is collective over the communicator (for MPI, so is destroying it).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "shardwise/comm/shared/epoch_flags.hpp"
#include "shardwise/comm/shared_memory.hpp"
#include "shardwise/core/checked_index.hpp"
#include "shardwise/core/error.hpp"

namespace shardwise {

// For every rank of `comm`, the lowest rank whose memory it reaches (collective): where the backend
// shares memory (comm/shared_memory.hpp), ranks with the same entry do; elsewhere each rank is alone.
template <class Comm>
[[nodiscard]] std::vector<int> shared_memory_groups_of(Comm& comm) {
  if constexpr (requires { shared_memory_groups(comm); }) {
    return shared_memory_groups(comm);
  } else {
    std::vector<int> alone(static_cast<std::size_t>(comm.size()));
    for (int r = 0; r < comm.size(); ++r) alone[static_cast<std::size_t>(r)] = r;
    return alone;
  }
}

template <class T>
class symmetric_window {
  static_assert(std::is_trivially_copyable_v<T>, "shardwise: a symmetric window holds trivially copyable elements");

 public:
  // This rank's buffer of `elements` (zeros) and `flags` fresh flags; collective over `comm` (sizes may
  // differ). Nothing where its ranks do not all share memory (MPI ranks on several nodes).
  template <class Comm>
  [[nodiscard]] static std::optional<symmetric_window> create(Comm& comm, std::size_t elements, std::size_t flags) {
    if constexpr (requires { share_memory(comm, elements); }) {
      auto memory = share_memory(comm, bytes_of(elements, flags));
      if (!memory) return std::nullopt;
      return symmetric_window(comm, std::move(*memory), elements, flags);
    } else {
      return std::nullopt;
    }
  }
  // The bytes of one rank's block: what create() maps for it, and what a simulated device counts.
  [[nodiscard]] static constexpr std::size_t bytes_of(std::size_t elements, std::size_t flags) noexcept {
    return flags_at(elements) + flags * sizeof(epoch_flag_word);
  }
  symmetric_window(symmetric_window&&) noexcept = default;
  symmetric_window& operator=(symmetric_window&&) = delete;
  symmetric_window(const symmetric_window&) = delete;
  symmetric_window& operator=(const symmetric_window&) = delete;

  [[nodiscard]] std::span<T> local() const noexcept { return peers_[static_cast<std::size_t>(rank_)]; }
  [[nodiscard]] std::span<T> peer_buffer(int peer) const {
    return element_at(peers_, peer, world_rank_, "symmetric_window::peer_buffer", "peer");
  }
  [[nodiscard]] const epoch_flags& flags() const noexcept { return peer_flags_[static_cast<std::size_t>(rank_)]; }
  [[nodiscard]] const epoch_flags& peer_flags(int peer) const {
    return element_at(peer_flags_, peer, world_rank_, "symmetric_window::peer_flags", "peer");
  }

  void put(int peer, std::size_t offset, std::span<const T> data) const {
    const auto target = peer_buffer(peer);
    if (offset > target.size() || data.size() > target.size() - offset)
      throw argument_error(world_rank_, "symmetric_window::put",
                           std::to_string(data.size()) + " elements at " + std::to_string(offset) + " overrun peer " +
                               std::to_string(peer) + "'s " + std::to_string(target.size()));
    std::memcpy(target.data() + offset, data.data(), data.size_bytes());
  }
  static void fence() noexcept { std::atomic_thread_fence(std::memory_order_release); }
  void signal(int peer, std::size_t flag, std::uint64_t epoch) const { peer_flags(peer).raise(flag, epoch); }
  [[nodiscard]] bool wait(std::size_t flag, std::uint64_t epoch, std::chrono::steady_clock::time_point deadline) const {
    return flags().wait(flag, epoch, deadline);
  }

 private:
  // Each block: the elements, then (from a cache line on) the flags.
  static constexpr std::size_t flags_at(std::size_t elements) noexcept {
    constexpr std::size_t line = 64;
    return (elements * sizeof(T) + line - 1) / line * line;
  }

  template <class Comm>
  symmetric_window(Comm& comm, shared_memory memory, std::size_t elements, std::size_t flags)
      : rank_(comm.rank()), world_rank_(comm.world_rank()), memory_(std::move(memory)) {
    // This rank's block starts as a fresh vector and fresh flags would, before any peer can reach it.
    const auto mine = memory_.local();
    std::memset(mine.data(), 0, elements * sizeof(T));
    for (std::size_t f = 0; f < flags; ++f)
      ::new (mine.data() + flags_at(elements) + f * sizeof(epoch_flag_word)) epoch_flag_word{};
    const std::int64_t counts[2] = {static_cast<std::int64_t>(elements), static_cast<std::int64_t>(flags)};
    std::vector<std::int64_t> all(2 * static_cast<std::size_t>(comm.size()));
    comm.all_gather(std::span<const std::int64_t>(counts, 2), all);  // also: every rank has set up its block
    for (int p = 0; p < comm.size(); ++p) {
      const auto block = memory_.block(p);
      const auto peer_elements = static_cast<std::size_t>(all[2 * static_cast<std::size_t>(p)]);
      const auto peer_flags = static_cast<std::size_t>(all[2 * static_cast<std::size_t>(p) + 1]);
      peers_.emplace_back(reinterpret_cast<T*>(block.data()), peer_elements);
      peer_flags_.emplace_back(
          std::span<epoch_flag_word>(reinterpret_cast<epoch_flag_word*>(block.data() + flags_at(peer_elements)),
                                     peer_flags),
          comm.size());
    }
  }

  int rank_;
  int world_rank_;
  shared_memory memory_;
  std::vector<std::span<T>> peers_;  // every rank's buffer, this rank's too
  std::vector<epoch_flags> peer_flags_;
};

}  // namespace shardwise
