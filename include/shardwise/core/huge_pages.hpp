#pragma once
// Memory for large buffers that are written row by row far apart: a rank's pooled embeddings land in a
// peer's output one row per sample, rows a whole output row (all tables) apart, so with 4 KiB pages
// every row written is a new page and a miss in the TLB. Blocks of 2 MiB or more start on a 2 MiB
// boundary and ask Linux for transparent huge pages (madvise: the setting most distributions ship),
// which cover 512 times the memory per TLB entry. A hint: where the kernel has none to give, or on other
// systems, the block is an ordinary one. Smaller blocks are 64-byte aligned, as the rest of the
// library's buffers.
//
//   std::vector<float, huge_page_allocator<float>> output(n);  // vector's interface, huge pages if n is large
#include <cstddef>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace shardwise {

inline constexpr std::size_t huge_page_bytes = std::size_t{2} << 20;

// The alignment of a block of `bytes` from allocate_huge_pages (what deallocate_huge_pages must be told).
[[nodiscard]] constexpr std::align_val_t huge_pages_alignment(std::size_t bytes) noexcept {
  return std::align_val_t{bytes >= huge_page_bytes ? huge_page_bytes : std::size_t{64}};
}

[[nodiscard]] inline void* allocate_huge_pages(std::size_t bytes) {
  void* block = ::operator new(bytes, huge_pages_alignment(bytes));
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  // Before the first touch, so the pages fault in huge; whole huge pages only (the tail stays small).
  if (bytes >= huge_page_bytes) ::madvise(block, bytes / huge_page_bytes * huge_page_bytes, MADV_HUGEPAGE);
#endif
  return block;
}

inline void deallocate_huge_pages(void* block, std::size_t bytes) noexcept {
  ::operator delete(block, huge_pages_alignment(bytes));
}

template <class T>
struct huge_page_allocator {
  using value_type = T;

  huge_page_allocator() = default;
  template <class U>
  constexpr huge_page_allocator(const huge_page_allocator<U>&) noexcept {}  // NOLINT(google-explicit-constructor)

  [[nodiscard]] T* allocate(std::size_t n) { return static_cast<T*>(allocate_huge_pages(n * sizeof(T))); }
  void deallocate(T* block, std::size_t n) noexcept { deallocate_huge_pages(block, n * sizeof(T)); }
  // Stateless: any one frees what another allocated.
  constexpr bool operator==(const huge_page_allocator&) const noexcept = default;
};

}  // namespace shardwise
