#pragma once
// The element memory of one rank: the bytes its tensors, parameters and optimizer state hold now (its
// storage), the bytes of working memory its operations hold now (buffers filled before they are read:
// the products' gather buffers, the exchanges' send and receive buffers), the high-water mark of the
// two together, and whether elements are stored at all. Every backend opens a scope around each rank's
// body (threads::run, mpi::run, sim_gpu::run, which also reports the marks), so a program reads its
// rank's figures with element_memory::of_this_thread(); shared_buffer (core/shared_buffer.hpp), where
// that memory is allocated, reports to it. Outside such a scope nothing is counted and elements are
// stored. A buffer shares ownership of the accounting it was counted in, so a buffer that outlives
// its rank's body (a result handed out of the run) gives its bytes back to an accounting still there.
//
// Shapes only: a rank that stores no elements counts its storage as a full run does, but its values
// (core/element.hpp's value_element) get no memory of their own: every such buffer lies at the start
// of one address range reserved for the process and backed by no memory until written
// (unstored_values), so thousands of simulated ranks cost neither allocations nor resident pages.
// Nothing should write there, since element loops run as kernels (core/kernel.hpp) or ask
// stored_on_this_thread() first; what a stray write leaves is a value no one reads.
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>

#include "shardwise/core/rank_local.hpp"

namespace shardwise {

enum class memory_use { storage, working };

class element_memory {
 public:
  explicit element_memory(bool stores_elements) noexcept : stores_elements_(stores_elements) {}

  [[nodiscard]] bool stores_elements() const noexcept { return stores_elements_; }
  // The storage held now.
  [[nodiscard]] std::int64_t bytes_held() const noexcept { return storage_.load(); }
  // The working memory held now (shared_buffer::scratch).
  [[nodiscard]] std::int64_t working_bytes_held() const noexcept { return working_.load(); }
  // The most the storage and the working memory held at once: what the device must have.
  [[nodiscard]] std::int64_t high_water() const noexcept { return high_water_.load(); }

  // Atomic: a buffer may be freed on another thread than the one that allocated it (the last holder
  // of a view), through the accounting it captured, which the backend keeps alive.
  void allocated(std::int64_t bytes, memory_use use) noexcept {
    const std::int64_t now = (counter(use) += bytes) + counter(other(use)).load();
    std::int64_t mark = high_water_.load();
    while (now > mark && !high_water_.compare_exchange_weak(mark, now)) {
    }
  }
  void freed(std::int64_t bytes, memory_use use) noexcept { counter(use) -= bytes; }

  // The accounting of the calling thread's rank, null outside a scope.
  [[nodiscard]] static element_memory* of_this_thread() noexcept { return current().get(); }
  // The same, shared: what a buffer keeps so that it can give its bytes back whenever it goes.
  [[nodiscard]] static std::shared_ptr<element_memory> shared_of_this_thread() noexcept { return current(); }

  // Whether the calling thread's rank stores elements (true outside a scope).
  [[nodiscard]] static bool stored_on_this_thread() noexcept {
    const element_memory* memory = current().get();
    return memory == nullptr || memory->stores_elements();
  }

  // Where a buffer of `bytes` of values lies on a rank that stores none: the start of the process's
  // unstored range, or null when the range cannot be reserved (strict overcommit) or is too small;
  // the caller then allocates for real.
  [[nodiscard]] static void* unstored_values(std::size_t bytes) noexcept {
    static constexpr std::size_t range_bytes = std::size_t{1} << 36;  // 64 GiB of addresses, no memory
    static void* const range = [] {
      void* start =
          ::mmap(nullptr, range_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      return start == MAP_FAILED ? nullptr : start;
    }();
    return bytes <= range_bytes ? range : nullptr;
  }

  // `elements` of T in the unstored range when the calling thread's rank stores no values and the
  // range can hold them; null otherwise (the caller stores them for real).
  template <class T>
  [[nodiscard]] static T* unstored_on_this_thread(std::size_t elements) noexcept {
    return stored_on_this_thread() ? nullptr : static_cast<T*>(unstored_values(elements * sizeof(T)));
  }

  // Makes `memory` the calling thread's accounting until the scope closes.
  class scope {
   public:
    explicit scope(std::shared_ptr<element_memory> memory) noexcept
        : previous_(std::exchange(current(), std::move(memory))) {}
    scope(const scope&) = delete;
    scope& operator=(const scope&) = delete;
    ~scope() { current() = std::move(previous_); }

   private:
    std::shared_ptr<element_memory> previous_;
  };

 private:
  struct accounting {
    std::shared_ptr<element_memory> memory;
  };
  static std::shared_ptr<element_memory>& current() noexcept { return rank_local<accounting>().memory; }
  static memory_use other(memory_use use) noexcept {
    return use == memory_use::storage ? memory_use::working : memory_use::storage;
  }
  std::atomic<std::int64_t>& counter(memory_use use) noexcept {
    return use == memory_use::storage ? storage_ : working_;
  }

  bool stores_elements_;
  std::atomic<std::int64_t> storage_{0};
  std::atomic<std::int64_t> working_{0};
  std::atomic<std::int64_t> high_water_{0};
};

// Bytes a rank holds outside shared_buffer (an operator's buffers kept across calls, a shared-memory
// window), counted by the calling thread's accounting while this lives, in full and shapes-only runs
// alike: the memory a full run takes, whether or not this one takes it.
class counted_bytes {
 public:
  counted_bytes() = default;
  counted_bytes(std::int64_t bytes, memory_use use) noexcept
      : memory_(element_memory::shared_of_this_thread()), bytes_(bytes), use_(use) {
    if (memory_ != nullptr) memory_->allocated(bytes_, use_);
  }
  counted_bytes(counted_bytes&& other) noexcept
      : memory_(std::move(other.memory_)), bytes_(std::exchange(other.bytes_, 0)), use_(other.use_) {}
  counted_bytes& operator=(counted_bytes&& other) noexcept {
    if (this != &other) {
      release();
      memory_ = std::move(other.memory_);
      bytes_ = std::exchange(other.bytes_, 0);
      use_ = other.use_;
    }
    return *this;
  }
  counted_bytes(const counted_bytes&) = delete;
  counted_bytes& operator=(const counted_bytes&) = delete;
  ~counted_bytes() { release(); }

  [[nodiscard]] std::int64_t bytes() const noexcept { return bytes_; }

 private:
  void release() noexcept {
    if (memory_ != nullptr) memory_->freed(bytes_, use_);
    memory_.reset();
    bytes_ = 0;
  }

  std::shared_ptr<element_memory> memory_;
  std::int64_t bytes_ = 0;
  memory_use use_ = memory_use::working;
};

// Copies elements, unless the calling thread's rank stores none (then there is nothing to copy).
template <class T>
void copy_elements(std::span<const T> from, T* to) {
  if (element_memory::stored_on_this_thread()) std::ranges::copy(from, to);
}

}  // namespace shardwise
