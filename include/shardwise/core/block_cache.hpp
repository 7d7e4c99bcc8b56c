#pragma once
// block_cache: the memory of freed element buffers (core/shared_buffer.hpp), kept by the thread that
// frees it for the next buffer of the same size, as PyTorch's caching allocator keeps device memory.
//
// Why: a training step frees its activations in the backward pass and allocates them again in the next
// forward, the same sizes every step. Given back to glibc, large blocks go back to the kernel (munmap,
// or a trimmed heap) and come back as fresh pages that fault in one by one: on one rank that halved
// the GPT example's tokens per second. Kept here, the next step's tensors reuse them.
//
// A thread keeps at most as many bytes as it once had in use at the same time (its high-water mark of
// buffers allocated and not yet freed), so a program's footprint stays below twice its peak even when
// the sizes it asks for change. Blocks a thread keeps are freed when it ends.
#include <cstddef>
#include <new>
#include <unordered_map>
#include <vector>

namespace shardwise {

// AddressSanitizer and ThreadSanitizer watch the allocator: under them every block goes back to it.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SHARDWISE_SANITIZED_ALLOCATOR 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SHARDWISE_SANITIZED_ALLOCATOR 1
#endif
#endif

class block_cache {
 public:
  static constexpr std::size_t alignment = 64;
#ifdef SHARDWISE_SANITIZED_ALLOCATOR
  static constexpr bool keeps_blocks = false;
#else
  static constexpr bool keeps_blocks = true;
#endif

  // A block of `bytes`, 64-byte aligned: one this thread freed before, or a new one.
  [[nodiscard]] static void* take(std::size_t bytes) {
    block_cache* cache = of_this_thread();
    if (cache == nullptr) return allocate(bytes);
    cache->in_use_ += bytes;
    if (cache->in_use_ > cache->high_water_) cache->high_water_ = cache->in_use_;
    if (auto found = cache->free_.find(bytes); found != cache->free_.end() && !found->second.empty()) {
      void* block = found->second.back();
      found->second.pop_back();
      cache->cached_ -= bytes;
      return block;
    }
    return allocate(bytes);
  }

  // Gives back a block of `bytes` from take(), whichever thread took it.
  static void give_back(void* block, std::size_t bytes) {
    block_cache* cache = of_this_thread();
    if (cache == nullptr) return deallocate(block);
    cache->in_use_ -= bytes < cache->in_use_ ? bytes : cache->in_use_;  // a block taken elsewhere counts there
    if (!keeps_blocks || cache->cached_ + bytes > cache->high_water_) return deallocate(block);
    cache->free_[bytes].push_back(block);
    cache->cached_ += bytes;
  }

  // The bytes this thread keeps for reuse.
  [[nodiscard]] static std::size_t cached_bytes() {
    const block_cache* cache = of_this_thread();
    return cache == nullptr ? 0 : cache->cached_;
  }

  // Gives this thread's kept blocks back to the allocator, as torch.cuda.empty_cache() does: for a
  // program that measures its heap (mallinfo2) across a pass, or hands memory to other work.
  static void release_this_thread() {
    if (block_cache* cache = of_this_thread()) cache->release();
  }

  block_cache(const block_cache&) = delete;
  block_cache& operator=(const block_cache&) = delete;

 private:
  block_cache() = default;
  ~block_cache() {
    release();
    destroyed_ = true;
  }

  void release() {
    for (auto& [bytes, blocks] : free_) {
      for (void* block : blocks) deallocate(block);
      blocks.clear();
    }
    cached_ = 0;
  }

  // This thread's cache, or none once the thread's objects are being destroyed (a thread_local buffer
  // destroyed after the cache frees its block directly).
  [[nodiscard]] static block_cache* of_this_thread() {
    thread_local block_cache cache;
    return destroyed_ ? nullptr : &cache;
  }
  static void* allocate(std::size_t bytes) { return ::operator new[](bytes, std::align_val_t{alignment}); }
  static void deallocate(void* block) { ::operator delete[](block, std::align_val_t{alignment}); }

  static inline thread_local bool destroyed_ = false;  // trivially destructible: readable to the thread's end
  std::unordered_map<std::size_t, std::vector<void*>> free_;
  std::size_t in_use_ = 0, high_water_ = 0, cached_ = 0;
};

}  // namespace shardwise
