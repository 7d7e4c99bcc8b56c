#pragma once
// Stores for data the writer will not read again soon. A large collective's output is far bigger
// than the caches, so ordinary stores first read every destination line (read-for-ownership) only to
// overwrite it; non-temporal stores skip that read and save a third of the memory traffic. Small
// outputs keep ordinary stores: the caller usually reads them next, from cache.
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace shardwise::detail {

// Below this many bytes written by one rank in one call, ordinary stores win.
inline constexpr std::size_t streaming_threshold_bytes = std::size_t{4} << 20;

// Whether a rank that writes this many bytes in one call should store them around the caches; decided
// once per call, so every block of it is stored the same way.
[[nodiscard]] constexpr bool streams_bytes(std::size_t bytes_written) noexcept {
  return bytes_written >= streaming_threshold_bytes;
}

inline void store_bytes(std::byte* to, const std::byte* from, std::size_t bytes, bool streaming) noexcept {
#if defined(__SSE2__)
  if (streaming) {
    const std::size_t misalignment = reinterpret_cast<std::uintptr_t>(to) % 16;
    const std::size_t head = misalignment == 0 ? 0 : (bytes < 16 - misalignment ? bytes : 16 - misalignment);
    std::memcpy(to, from, head);
    to += head;
    from += head;
    bytes -= head;
    for (; bytes >= 64; bytes -= 64, to += 64, from += 64) {
      auto* line = reinterpret_cast<__m128i*>(to);
      const auto* source = reinterpret_cast<const __m128i*>(from);
      _mm_stream_si128(line, _mm_loadu_si128(source));
      _mm_stream_si128(line + 1, _mm_loadu_si128(source + 1));
      _mm_stream_si128(line + 2, _mm_loadu_si128(source + 2));
      _mm_stream_si128(line + 3, _mm_loadu_si128(source + 3));
    }
  }
#else
  (void)streaming;
#endif
  if (bytes != 0) std::memcpy(to, from, bytes);
}

// count elements from `from` to `to`, as store_bytes stores them; nothing where they are the same.
template <class T>
void store_elements(T* to, const T* from, std::size_t count, bool streaming) noexcept {
  if (count != 0 && to != from)
    store_bytes(reinterpret_cast<std::byte*>(to), reinterpret_cast<const std::byte*>(from), count * sizeof(T),
                streaming);
}

// Non-temporal stores are weakly ordered: fence them before telling a peer the data is there.
inline void finish_streaming() noexcept {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

}  // namespace shardwise::detail
