#pragma once
// reduce(t): sums a partial-sum tensor (layout/partial_sum.hpp) over its pending mesh axes, giving the
// final tensor of the underlying layout on every rank of those axes (one all_reduce over them). Of a
// temporary, the sum is taken in the addends' own storage, which the result keeps; of a tensor the
// caller keeps, in a copy. redistribute<L>(t) into the final layout is reduce(t); into another layout
// it sums and moves at once (tensor/distribute.hpp).
//
//   dtensor<float, partial_sum<col_1d<>, 1>, Mesh> addends = ...;   // rows over axis 0, sum over axis 1
//   dtensor<float, col_1d<>, Mesh> sums = reduce(std::move(addends));
#include <algorithm>
#include <cstdint>
#include <utility>

#include "shardwise/core/kernel.hpp"
#include "shardwise/layout/partial_sum.hpp"
#include "shardwise/tensor/describe.hpp"
#include "shardwise/tensor/dtensor.hpp"
#include "shardwise/tensor/exchange_sum.hpp"

namespace shardwise {

namespace detail {
template <class T, class Layout, class Mesh>
consteval void check_reducible() {
  static_assert(is_partial_sum_v<Layout>,
                "shardwise::reduce: the tensor is not a partial sum; there is nothing to reduce");
  static_assert(detail::summable<T, Mesh::dimensions>(Layout::pending_axes),
                "shardwise::reduce: the pending sum names a mesh axis the mesh does not have");
}
}  // namespace detail

template <class T, class Layout, class Mesh>
[[nodiscard]] auto reduce(const dtensor<T, Layout, Mesh>& addends) try {
  detail::check_reducible<T, Layout, Mesh>();
  dtensor<T, typename Layout::final_layout, Mesh> sums(addends.mesh(), addends.extents());
  run_copy<T>(addends.mesh().world(), static_cast<std::int64_t>(addends.data().size()), "reduce",
              [&] { std::ranges::copy(addends.data(), sums.data().begin()); });
  detail::sum_along(addends.mesh(), Layout::pending_axes, sums.data());
  return sums;
} catch (...) {
  rethrow_within_call(world_rank_of(addends), call_text("reduce", describe(addends)));
}

template <class T, class Layout, class Mesh>
[[nodiscard]] auto reduce(dtensor<T, Layout, Mesh>&& addends) try {
  detail::check_reducible<T, Layout, Mesh>();
  // A bound tensor's storage is an update's buffer, which the sum must not take over.
  if (addends.is_bound()) return reduce(std::as_const(addends));
  detail::sum_along(addends.mesh(), Layout::pending_axes, addends.data());
  return detail::summed_in_place::final_tensor(std::move(addends));
} catch (...) {
  rethrow_within_call(world_rank_of(addends), call_text("reduce", describe(addends)));
}

}  // namespace shardwise
