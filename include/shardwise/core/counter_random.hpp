#pragma once
// Counter-based random numbers: a value is a hash of its key (seed, row, column), not the next draw of
// a stream. Any rank computes the value of any element without the others, so a random mask over a
// distributed matrix is the serial mask, whatever the layout and the number of ranks, and the
// backward pass regenerates it instead of storing it. The hash is splitmix64's finaliser (Steele, Lea,
// Flood, "Fast splittable pseudorandom number generators", 2014), applied once per key part.
#include <cstdint>

namespace shardwise {

[[nodiscard]] constexpr std::uint64_t splitmix64(std::uint64_t z) noexcept {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30U)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27U)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31U);
}

// A uniform double in [0, 1) for element (row, column) under `seed`: the hash's top 53 bits.
[[nodiscard]] constexpr double uniform_at(std::uint64_t seed, std::int64_t row, std::int64_t column) noexcept {
  const std::uint64_t key =
      splitmix64(splitmix64(splitmix64(seed) ^ static_cast<std::uint64_t>(row)) ^ static_cast<std::uint64_t>(column));
  return static_cast<double>(key >> 11U) * 0x1.0p-53;
}

}  // namespace shardwise
