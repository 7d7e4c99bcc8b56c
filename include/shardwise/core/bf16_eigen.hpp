#pragma once
// bf16 as an Eigen scalar, so that blocks of bf16 tensors are Eigen maps like float's: an expression
// widens each element to float, computes in float and rounds on store (core/bf16.hpp). Sums and
// products that accumulate are written on `.template cast<accumulator_t<T>>()` (core/element.hpp),
// float for bf16, so that they accumulate in float as well; for float and double the cast is the
// expression itself.
#include <Eigen/Core>

#include "shardwise/core/bf16.hpp"

template <>
struct Eigen::NumTraits<shardwise::bf16> : Eigen::GenericNumTraits<shardwise::bf16> {
  using Real = shardwise::bf16;
  using NonInteger = shardwise::bf16;
  using Literal = shardwise::bf16;
  using Nested = shardwise::bf16;
  enum {
    IsComplex = 0,
    IsInteger = 0,
    IsSigned = 1,
    RequireInitialization = 0,
    ReadCost = 1,
    AddCost = 3,
    MulCost = 3
  };
  static shardwise::bf16 dummy_precision() { return shardwise::bf16(1e-2f); }
};
