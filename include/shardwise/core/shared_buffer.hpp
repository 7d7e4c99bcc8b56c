#pragma once
// shared_buffer<T>: a run of elements whose memory may be shared. A training update keeps all the
// weights (and all the gradients) of a model in one flat buffer, so that it can reduce and gather
// them bucket by bucket; each parameter's tensor then stores its elements in a view of that buffer
// instead of a copy of its own (dtensor::bind). Views keep the buffer alive: neither side can dangle,
// whichever is destroyed first.
//
//   auto flat = shared_buffer<float>::zeros(1000);
//   shared_buffer<float> part = flat.view(200, 50);    // elements 200..249 of flat, same memory
#include <algorithm>
#include <cstddef>
#include <memory>
#include <span>

namespace shardwise {

template <class T>
class shared_buffer {
 public:
  shared_buffer() = default;

  // `count` value-initialised elements (zeros for arithmetic types).
  [[nodiscard]] static shared_buffer zeros(std::size_t count) {
    shared_buffer buffer;
    buffer.owner_ = std::make_shared<T[]>(count);
    buffer.data_ = buffer.owner_.get();
    buffer.size_ = count;
    return buffer;
  }

  // A new buffer holding a copy of `elements`.
  [[nodiscard]] static shared_buffer copy_of(std::span<const T> elements) {
    shared_buffer buffer = zeros(elements.size());
    std::ranges::copy(elements, buffer.data_);
    return buffer;
  }

  // Elements [offset, offset + count) of this buffer, sharing its memory. The caller keeps the range
  // inside the buffer.
  [[nodiscard]] shared_buffer view(std::size_t offset, std::size_t count) const {
    shared_buffer part;
    part.owner_ = owner_;
    part.data_ = data_ + offset;
    part.size_ = count;
    return part;
  }

  [[nodiscard]] std::span<T> span() const noexcept { return {data_, size_}; }
  [[nodiscard]] T* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  std::shared_ptr<T[]> owner_;
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace shardwise
