#pragma once
// bfloat16 as a storage type: the upper 16 bits of an IEEE float. Arithmetic happens in float; the
// library converts on load and rounds to nearest-even on store, as accelerators do.
#include <bit>
#include <cstdint>

namespace shardwise {

struct bf16 {
  std::uint16_t bits = 0;

  constexpr bf16() = default;
  constexpr bf16(float value) noexcept : bits(round_to_nearest_even(value)) {}  // NOLINT: implicit like float
  constexpr operator float() const noexcept {                                   // NOLINT
    return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
  }
  static constexpr bf16 from_bits(std::uint16_t raw) noexcept {
    bf16 value;
    value.bits = raw;
    return value;
  }
  friend constexpr bool operator==(bf16 a, bf16 b) noexcept { return a.bits == b.bits; }

 private:
  static constexpr std::uint16_t round_to_nearest_even(float value) noexcept {
    const auto word = std::bit_cast<std::uint32_t>(value);
    if ((word & 0x7f800000u) == 0x7f800000u && (word & 0x007fffffu) != 0) {
      return static_cast<std::uint16_t>((word >> 16) | 0x0040u);  // keep NaN a (quiet) NaN
    }
    const std::uint32_t rounding = 0x7fffu + ((word >> 16) & 1u);
    return static_cast<std::uint16_t>((word + rounding) >> 16);
  }
};

static_assert(sizeof(bf16) == 2, "bf16 must be exactly two bytes: it is a storage type");

}  // namespace shardwise
