#pragma once
// GPU-initiated communication between ranks that share memory (the threads backend, and the data of
// the sim_gpu backend): every rank allocates a buffer and a set of epoch flags (sim/epoch_flags.hpp),
// the ranks exchange addresses once, and from then on a rank reaches its peers' memory directly —
// what roc_shmem_ptr / NVSHMEM give a kernel on peers joined by xGMI or NVLink.
//
//   put(peer, offset, data)   stores into the peer's buffer
//   peer_buffer(peer)         the peer's buffer itself, for zero-copy stores as results are computed
//   fence()                   orders the stores before it ahead of the signals after it
//   signal(peer, flag, e)     raises the peer's flag to epoch e
//   wait(flag, e, deadline)   blocks until this rank's own flag reaches epoch e
// Creating a window is collective over the communicator (an all-gather of addresses).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "shardwise/comm/threads.hpp"
#include "shardwise/core/error.hpp"
#include "shardwise/sim/epoch_flags.hpp"

namespace shardwise::sim {

template <class T>
class symmetric_window {
  static_assert(std::is_trivially_copyable_v<T>, "shardwise: a symmetric window holds trivially copyable elements");

 public:
  // This rank's buffer of `elements` and `flags` flags; collective over `comm` (sizes may differ).
  symmetric_window(threads::communicator& comm, std::size_t elements, std::size_t flags)
      : rank_(comm.world_rank()), buffer_(elements), flags_(std::make_unique<epoch_flags>(flags)) {
    const std::int64_t mine[3] = {address_of(buffer_.data()), static_cast<std::int64_t>(elements),
                                  address_of(flags_.get())};
    std::vector<std::int64_t> all(3 * static_cast<std::size_t>(comm.size()));
    comm.all_gather(std::span<const std::int64_t>(mine, 3), all);
    for (std::size_t p = 0; p < all.size(); p += 3) {
      peers_.push_back({reinterpret_cast<T*>(static_cast<std::uintptr_t>(all[p])), static_cast<std::size_t>(all[p + 1])});
      peer_flags_.push_back(reinterpret_cast<epoch_flags*>(static_cast<std::uintptr_t>(all[p + 2])));
    }
  }
  symmetric_window(const symmetric_window&) = delete;
  symmetric_window& operator=(const symmetric_window&) = delete;

  [[nodiscard]] std::span<T> local() noexcept { return buffer_; }
  [[nodiscard]] std::span<T> peer_buffer(int peer) const { return peers_.at(static_cast<std::size_t>(peer)); }
  [[nodiscard]] epoch_flags& flags() noexcept { return *flags_; }
  [[nodiscard]] epoch_flags& peer_flags(int peer) const { return *peer_flags_.at(static_cast<std::size_t>(peer)); }

  void put(int peer, std::size_t offset, std::span<const T> data) const {
    const auto target = peer_buffer(peer);
    if (offset > target.size() || data.size() > target.size() - offset)
      throw argument_error(rank_, "symmetric_window::put",
                           std::to_string(data.size()) + " elements at " + std::to_string(offset) + " overrun peer " +
                               std::to_string(peer) + "'s " + std::to_string(target.size()));
    std::memcpy(target.data() + offset, data.data(), data.size_bytes());
  }
  static void fence() noexcept { std::atomic_thread_fence(std::memory_order_release); }
  void signal(int peer, std::size_t flag, std::uint64_t epoch) const { peer_flags(peer).raise(flag, epoch); }
  [[nodiscard]] bool wait(std::size_t flag, std::uint64_t epoch, std::chrono::steady_clock::time_point deadline) {
    return flags_->wait(flag, epoch, deadline);
  }

 private:
  template <class P>
  static std::int64_t address_of(P* pointer) noexcept {
    return static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(pointer));
  }

  int rank_;
  std::vector<T> buffer_;
  std::unique_ptr<epoch_flags> flags_;
  std::vector<std::span<T>> peers_;
  std::vector<epoch_flags*> peer_flags_;
};

}  // namespace shardwise::sim
