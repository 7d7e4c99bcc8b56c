#pragma once
// reused_buffer<T>: working memory an operation fills before it reads, kept across calls and grown to
// the largest asked of it. A training step runs the same operations every step, so after its first it
// allocates none of their buffers: allocating a large one per call costs its pages' faults on every call
// (on threads, more than the collective that reads it). Large buffers are on huge pages
// (core/huge_pages.hpp), small ones 64-byte aligned as shared_buffer's, so that a reduction over one
// rounds the same way in every run.
//
// Counted as the rank's working memory (core/element_memory.hpp) at its largest size. A rank that stores
// no values (shapes only) gets the unstored range for values instead, counted alike (integers, which
// steer a program, are stored on every rank); a buffer used first by such a rank and then by one that
// stores values (a user's backend may run both on one thread) gets memory of its own then.
//
//   reused_buffer<float> gathered;                 // a member, or rank_local, so that it outlives the call
//   std::span<float> panel = gathered.take(rows * cols);   // contents unspecified: fill before reading
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "shardwise/core/element.hpp"
#include "shardwise/core/element_memory.hpp"
#include "shardwise/core/huge_pages.hpp"

namespace shardwise {

template <class T>
class reused_buffer {
 public:
  // `elements` of the buffer: a larger request replaces the memory held, whose contents are not kept
  // (given back first: never both held at once).
  [[nodiscard]] std::span<T> take(std::size_t elements) {
    if (const auto bytes = static_cast<std::int64_t>(elements * sizeof(T)); bytes > counted_.bytes()) {
      counted_ = {};
      counted_ = counted_bytes(bytes, memory_use::working);
    }
    if constexpr (value_element<T>)
      if (T* nowhere = element_memory::unstored_on_this_thread<T>(elements)) return {nowhere, elements};
    if (values_.size() < elements) {
      std::vector<T, huge_page_allocator<T>>().swap(values_);
      values_.resize(elements);
    }
    return {values_.data(), elements};
  }

 private:
  std::vector<T, huge_page_allocator<T>> values_;
  counted_bytes counted_;
};

}  // namespace shardwise
