#pragma once
// shared_buffer<T>: a run of elements whose memory may be shared. A training update keeps all the
// weights (and all the gradients) of a model in one flat buffer, so that it can reduce and gather
// them bucket by bucket; each parameter's tensor then stores its elements in a view of that buffer
// instead of a copy of its own (dtensor::bind). Views keep the buffer alive: neither side can dangle,
// whichever is destroyed first.
//
//   auto flat = shared_buffer<float>::zeros(1000);
//   shared_buffer<float> part = flat.view(200, 50);    // elements 200..249 of flat, same memory
//
// A buffer starts on a 64-byte boundary (a cache line, an AVX-512 vector). Eigen's vectorised
// reductions split a row into a scalar head up to the first aligned address and whole vectors after
// it, so a sum's rounding depends on where its data starts modulo the vector size: with every buffer
// aligned alike, the same computation on the same offsets gives the same bits in every run. The memory
// comes from, and goes back to, the thread's cache of freed blocks (core/block_cache.hpp).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <type_traits>

#include "shardwise/core/block_cache.hpp"
#include "shardwise/core/element.hpp"
#include "shardwise/core/element_memory.hpp"

namespace shardwise {

template <class T>
class shared_buffer {
 public:
  shared_buffer() = default;

  static constexpr std::size_t alignment = block_cache::alignment;

  // `count` value-initialised elements (zeros for arithmetic types): storage of a tensor, of parameters
  // or of optimizer state, counted by the rank's element_memory (core/element_memory.hpp) while it
  // lives. Where the rank stores no elements the memory is allocated but left untouched.
  [[nodiscard]] static shared_buffer zeros(std::size_t count) { return allocate(count, memory_use::storage); }

  // Like zeros, for working memory that an operation fills before it reads (the products' gather
  // buffers, the exchanges' send and receive buffers): counted as such, apart from the storage, and in
  // the high-water mark with it, since a device must hold both at once.
  [[nodiscard]] static shared_buffer scratch(std::size_t count) { return allocate(count, memory_use::working); }

  // Elements [offset, offset + count) of this buffer, sharing its memory. The caller keeps the range
  // inside the buffer.
  [[nodiscard]] shared_buffer view(std::size_t offset, std::size_t count) const {
    shared_buffer part;
    part.owner_ = owner_;
    part.data_ = data_ + offset;
    part.size_ = count;
    part.stored_ = stored_;
    return part;
  }

  [[nodiscard]] std::span<T> span() const noexcept { return {data_, size_}; }
  // Whether the elements have memory of their own: not for values on a rank that stores none
  // (core/element_memory.hpp).
  [[nodiscard]] bool stored() const noexcept { return stored_; }
  [[nodiscard]] T* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  static shared_buffer allocate(std::size_t count, memory_use use) {
    std::shared_ptr<element_memory> counted = element_memory::shared_of_this_thread();
    static_assert(std::is_trivially_destructible_v<T>, "shared_buffer holds plain numbers");
    shared_buffer buffer;
    const std::size_t bytes = std::max<std::size_t>(count, 1) * sizeof(T);
    T* elements = nullptr;
    if constexpr (value_element<T>)
      if (!element_memory::stored_on_this_thread()) elements = static_cast<T*>(element_memory::unstored_values(bytes));
    buffer.stored_ = elements == nullptr;
    if (buffer.stored_) {
      elements = static_cast<T*>(block_cache::take(bytes));
      if (element_memory::stored_on_this_thread()) std::uninitialized_value_construct_n(elements, count);
    }
    if (counted != nullptr) counted->allocated(static_cast<std::int64_t>(count * sizeof(T)), use);
    buffer.owner_ = std::shared_ptr<T[]>(
        elements, [counted = std::move(counted), use, count, bytes, stored = buffer.stored_](T* p) {
          if (counted != nullptr) counted->freed(static_cast<std::int64_t>(count * sizeof(T)), use);
          if (stored) block_cache::give_back(p, bytes);
        });
    buffer.data_ = elements;
    buffer.size_ = count;
    return buffer;
  }

  std::shared_ptr<T[]> owner_;
  T* data_ = nullptr;
  std::size_t size_ = 0;
  bool stored_ = true;
};

}  // namespace shardwise
