#pragma once
// Which element types may travel through a communicator, and in what type reductions accumulate.
#include <concepts>
#include <cstdint>
#include <string>
#include <type_traits>

#include "shardwise/core/bf16.hpp"

namespace shardwise {

// Anything that can be copied as bytes can be moved (gather, all-to-all, broadcast, send).
template <class T>
concept communicable = std::is_trivially_copyable_v<T> && !std::is_const_v<T>;

// Types a reduction (sum, prod, min, max) is defined on. bf16 is reduced in float.
template <class T>
concept reducible = std::same_as<T, float> || std::same_as<T, double> || std::same_as<T, std::int32_t> ||
                    std::same_as<T, std::int64_t> || std::same_as<T, bf16>;

// Elements that are values: what kernels compute and read (floating point, bf16), as opposed to
// integers that steer a program (counts, indices, plans). A run that prices kernels without computing
// them (sim_gpu's shapes-only execution) neither stores nor moves values, and still moves integers.
template <class T>
concept value_element = std::is_floating_point_v<T> || std::same_as<T, bf16>;

// The type partial results are held in while reducing T.
template <reducible T>
using accumulator_t = std::conditional_t<std::is_same_v<T, bf16>, float, T>;

// How errors name an element type: float, double, int32, int64, bf16; any other by its size.
template <class T>
[[nodiscard]] std::string element_name() {
  if constexpr (std::is_same_v<T, float>) return "float";
  else if constexpr (std::is_same_v<T, double>)
    return "double";
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return "int32";
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return "int64";
  else if constexpr (std::is_same_v<T, bf16>)
    return "bf16";
  else
    return std::to_string(sizeof(T)) + "-byte type";
}

}  // namespace shardwise
