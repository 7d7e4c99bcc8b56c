#pragma once
// The element storage of one rank: the bytes its tensors, parameters and optimizer state hold now, their
// high-water mark, and whether elements are stored at all. A backend that runs each rank as a thread
// and reports memory (sim_gpu, sim/sim_gpu.hpp) opens a scope on each rank's thread; shared_buffer
// (core/shared_buffer.hpp), where that storage is allocated, reports to it. Outside such a scope
// nothing is counted and elements are stored.
//
// Shapes only: a rank that stores no elements still allocates (so the storage's size and the
// accounting are those of a full run) but neither zeroes nor copies the elements, so pages that nothing
// else touches cost no resident memory. Element loops run as kernels (core/kernel.hpp) or ask
// stored_on_this_thread() first; those that do neither yet (copies and zero-fills inside model::gpt,
// the sharded update's gradient norm) still touch the storage they loop over.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <span>

namespace shardwise {

class element_memory {
 public:
  explicit element_memory(bool stores_elements) noexcept : stores_elements_(stores_elements) {}

  [[nodiscard]] bool stores_elements() const noexcept { return stores_elements_; }
  [[nodiscard]] std::int64_t bytes_held() const noexcept { return held_.load(); }
  [[nodiscard]] std::int64_t high_water() const noexcept { return high_water_.load(); }

  // Atomic: a buffer may be freed on another thread than the one that allocated it (the last holder
  // of a view), through the accounting it captured, which the backend keeps alive.
  void allocated(std::int64_t bytes) noexcept {
    const std::int64_t now = held_ += bytes;
    std::int64_t mark = high_water_.load();
    while (now > mark && !high_water_.compare_exchange_weak(mark, now)) {
    }
  }
  void freed(std::int64_t bytes) noexcept { held_ -= bytes; }

  // The accounting of the calling thread's rank, null outside a scope.
  [[nodiscard]] static element_memory* of_this_thread() noexcept { return current(); }

  // Whether the calling thread's rank stores elements (true outside a scope).
  [[nodiscard]] static bool stored_on_this_thread() noexcept {
    const element_memory* memory = current();
    return memory == nullptr || memory->stores_elements();
  }

  // Makes `memory` the calling thread's accounting until the scope closes.
  class scope {
   public:
    explicit scope(element_memory& memory) noexcept : previous_(current()) { current() = &memory; }
    scope(const scope&) = delete;
    scope& operator=(const scope&) = delete;
    ~scope() { current() = previous_; }

   private:
    element_memory* previous_;
  };

 private:
  static element_memory*& current() noexcept {
    thread_local element_memory* memory = nullptr;
    return memory;
  }

  bool stores_elements_;
  std::atomic<std::int64_t> held_{0};
  std::atomic<std::int64_t> high_water_{0};
};

// Copies elements, unless the calling thread's rank stores none (then there is nothing to copy).
template <class T>
void copy_elements(std::span<const T> from, T* to) {
  if (element_memory::stored_on_this_thread()) std::ranges::copy(from, to);
}

}  // namespace shardwise
