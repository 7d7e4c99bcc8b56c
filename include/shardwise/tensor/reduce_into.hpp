#pragma once
// reduce_into<Layout>(addends): every rank of a mesh holds an addend of one whole matrix (the rows of
// a vocabulary cut over the mesh, looked up or multiplied); their sum is wanted in Layout. When Layout
// is replicated<> the addends are all-reduced in place; otherwise they go straight into Layout's blocks
// (redistribute of a partial sum: one reduce-scatter over the mesh when the blocks tile the matrix,
// tensor/exchange_sum.hpp), so no rank holds the whole sum and each moves half an all-reduce's bytes.
// The addends are made in whole_addend_layout<Layout, D>, which is replicated<> or a pending sum
// over every axis:
//
//   dtensor<float, whole_addend_layout<col_1d<>, 1>, Mesh> x(mesh, {tokens, hidden});  // zeros
//   ... this rank's addend into x.local() ...
//   dtensor<float, col_1d<>, Mesh> sums = reduce_into<col_1d<>>(std::move(x));
#include <cstddef>
#include <type_traits>
#include <utility>

#include "shardwise/comm/reduction.hpp"
#include "shardwise/core/error.hpp"
#include "shardwise/layout/partial_sum.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/tensor/describe.hpp"
#include "shardwise/tensor/distribute.hpp"
#include "shardwise/tensor/dtensor.hpp"

namespace shardwise {

// How each rank of a mesh of D dimensions holds its addend of a whole matrix summed into Layout.
template <class Layout, std::size_t D>
using whole_addend_layout =
    std::conditional_t<std::is_same_v<Layout, replicated<>>, replicated<>, partial_sum_over_all<replicated<>, D>>;

template <class Layout, class T, class AddendLayout, class Mesh>
[[nodiscard]] dtensor<T, Layout, Mesh> reduce_into(dtensor<T, AddendLayout, Mesh>&& addends) try {
  static_assert(std::is_same_v<AddendLayout, whole_addend_layout<Layout, Mesh::dimensions>>,
                "shardwise::reduce_into: the addends must be whole on every rank, in "
                "whole_addend_layout<Layout, Mesh::dimensions>");
  if constexpr (std::is_same_v<Layout, replicated<>>) {
    addends.mesh().world().all_reduce(addends.data(), op::sum);
    return std::move(addends);
  } else {
    return redistribute<Layout>(addends);
  }
} catch (...) {
  rethrow_within_call(world_rank_of(addends), call_text("reduce_into", describe(addends)));
}

}  // namespace shardwise
