#pragma once
// reduce(t): sums a partial-sum tensor (layout/partial_sum.hpp) over its pending mesh axes, giving the
// final tensor of the underlying layout on every rank of those axes (an all_reduce along each).
//
//   dtensor<float, partial_sum<col_1d<>, 1>, Mesh> addends = ...;   // rows over axis 0, sum over axis 1
//   dtensor<float, col_1d<>, Mesh> sums = reduce(addends);
#include <algorithm>
#include <cstddef>

#include "shardwise/comm/reduction.hpp"
#include "shardwise/core/element.hpp"
#include "shardwise/layout/partial_sum.hpp"
#include "shardwise/tensor/describe.hpp"
#include "shardwise/tensor/dtensor.hpp"

namespace shardwise {

template <class T, class Layout, class Mesh>
[[nodiscard]] auto reduce(const dtensor<T, Layout, Mesh>& addends) try {
  static_assert(is_partial_sum_v<Layout>,
                "shardwise::reduce: the tensor is not a partial sum; there is nothing to reduce");
  static_assert(reducible<T>,
                "shardwise::reduce: sums are defined on float, double, std::int32_t, std::int64_t and bf16");
  static_assert(std::ranges::all_of(Layout::pending_axes, [](std::size_t a) { return a < Mesh::dimensions; }),
                "shardwise::reduce: the pending sum names a mesh axis the mesh does not have");
  dtensor<T, typename Layout::final_layout, Mesh> sums(addends.mesh(), addends.extents());
  std::ranges::copy(addends.data(), sums.data().begin());
  for (const std::size_t a : Layout::pending_axes)
    addends.mesh().axis(static_cast<int>(a)).all_reduce(sums.data(), op::sum);
  return sums;
} catch (...) {
  rethrow_within_call(world_rank_of(addends), call_text("reduce", describe(addends)));
}

}  // namespace shardwise
