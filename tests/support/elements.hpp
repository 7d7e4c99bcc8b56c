#pragma once
// Element types every collective is tested with, values whose reductions are exact in each of them
// (small integers, so any summation order gives the same bits), and a comparison that names the
// first differing element.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "shardwise/comm/reduction.hpp"
#include "shardwise/core/bf16.hpp"
#include "shardwise/core/element.hpp"

namespace shardwise::testing {

template <class F>
void for_each_element_type(F&& f) {
  f.template operator()<float>();
  f.template operator()<double>();
  f.template operator()<std::int32_t>();
  f.template operator()<std::int64_t>();
  f.template operator()<bf16>();
}

// Element i of rank r's contribution, for a reduction: |value| <= 5 for sums (|sum| <= 5 P), and
// in {-2, -1, 1, 2} for products (|product| <= 2^P), all exact in bf16 for P <= 8.
template <class T>
T contribution(op reduction, int rank, std::size_t i) {
  const auto k = static_cast<long>(i);
  if (reduction == op::prod) {
    const long magnitude = 1 + (rank + k) % 2;
    return static_cast<T>(static_cast<float>((rank * 3 + k) % 5 == 0 ? -magnitude : magnitude));
  }
  return static_cast<T>(static_cast<float>((rank * 7 + k * 3) % 11 - 5));
}

template <class T>
std::vector<T> contributions(op reduction, int rank, std::size_t n) {
  std::vector<T> values(n);
  for (std::size_t i = 0; i < n; ++i) values[i] = contribution<T>(reduction, rank, i);
  return values;
}

// The serial reference: ranks combined in order 0..P-1, in the accumulator type.
template <class T>
std::vector<T> serial_reduction(op reduction, int ranks, std::size_t n) {
  std::vector<T> result(n);
  for (std::size_t i = 0; i < n; ++i) {
    auto accumulated = static_cast<accumulator_t<T>>(contribution<T>(reduction, 0, i));
    for (int r = 1; r < ranks; ++r) {
      const auto next = static_cast<accumulator_t<T>>(contribution<T>(reduction, r, i));
      dispatch(reduction, [&](auto compiled) { accumulated = combine<decltype(compiled)::value>(accumulated, next); });
    }
    result[i] = static_cast<T>(accumulated);
  }
  return result;
}

// A value that identifies (source rank, index) uniquely, for data that is only moved.
template <class T>
T tagged(int rank, std::size_t i) {
  return static_cast<T>(static_cast<float>((rank * 37 + static_cast<long>(i)) % 251));
}

template <class T>
::testing::AssertionResult same_elements(std::span<const T> actual, std::span<const T> expected) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure() << "sizes differ: " << actual.size() << " vs " << expected.size();
  for (std::size_t i = 0; i < actual.size(); ++i) {
    if (!(actual[i] == expected[i])) {
      std::ostringstream text;
      text << "element " << i << " of " << actual.size() << " is " << static_cast<double>(actual[i]) << ", expected "
           << static_cast<double>(expected[i]);
      return ::testing::AssertionFailure() << text.str();
    }
  }
  return ::testing::AssertionSuccess();
}

template <class T>
::testing::AssertionResult same_elements(const std::vector<T>& actual, const std::vector<T>& expected) {
  return same_elements(std::span<const T>(actual), std::span<const T>(expected));
}

}  // namespace shardwise::testing
