#pragma once
// bfloat16 as a storage type: the upper 16 bits of an IEEE float. Arithmetic happens in float; the
// library converts on load and rounds to nearest-even on store, as accelerators do. a += b and the
// like compute in float and round once. std::numeric_limits<bf16> describes it as the float it widens
// to would be described with 8 significant bits.
#include <bit>
#include <cstdint>
#include <limits>

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
  constexpr bf16& operator+=(float other) noexcept { return *this = static_cast<float>(*this) + other; }
  constexpr bf16& operator-=(float other) noexcept { return *this = static_cast<float>(*this) - other; }
  constexpr bf16& operator*=(float other) noexcept { return *this = static_cast<float>(*this) * other; }
  constexpr bf16& operator/=(float other) noexcept { return *this = static_cast<float>(*this) / other; }

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

template <>
struct std::numeric_limits<shardwise::bf16> {
  using bf16 = shardwise::bf16;

 public:
  static constexpr bool is_specialized = true;
  static constexpr bool is_signed = true;
  static constexpr bool is_integer = false;
  static constexpr bool is_exact = false;
  static constexpr bool has_infinity = true;
  static constexpr bool has_quiet_NaN = true;
  static constexpr bool has_signaling_NaN = true;
  static constexpr bool is_iec559 = false;
  static constexpr bool is_bounded = true;
  static constexpr bool is_modulo = false;
  static constexpr std::float_round_style round_style = std::round_to_nearest;
  static constexpr int radix = 2;
  static constexpr int digits = 8;
  static constexpr int digits10 = 2;
  static constexpr int max_digits10 = 4;
  static constexpr int min_exponent = std::numeric_limits<float>::min_exponent;
  static constexpr int min_exponent10 = std::numeric_limits<float>::min_exponent10;
  static constexpr int max_exponent = std::numeric_limits<float>::max_exponent;
  static constexpr int max_exponent10 = std::numeric_limits<float>::max_exponent10;
  static constexpr bf16 min() noexcept { return bf16::from_bits(0x0080); }
  static constexpr bf16 lowest() noexcept { return bf16::from_bits(0xff7f); }
  static constexpr bf16 max() noexcept { return bf16::from_bits(0x7f7f); }
  static constexpr bf16 epsilon() noexcept { return bf16::from_bits(0x3c00); }      // 2^-7
  static constexpr bf16 round_error() noexcept { return bf16::from_bits(0x3f00); }  // 0.5
  static constexpr bf16 infinity() noexcept { return bf16::from_bits(0x7f80); }
  static constexpr bf16 quiet_NaN() noexcept { return bf16::from_bits(0x7fc0); }
  static constexpr bf16 signaling_NaN() noexcept { return bf16::from_bits(0x7fa0); }
  static constexpr bf16 denorm_min() noexcept { return bf16::from_bits(0x0001); }
};
