#pragma once
// partial_sum<Layout, Axes...>: the blocks of Layout, each still an addend of a sum over mesh axes
// Axes... — the state of a local matrix product before its reduction (C_il in the 3-D paper before
// the reduce-scatter over z). The storage is Layout's; the state is in the type, so operations that
// are wrong on addends refuse to compile until reduce(t) (tensor/reduce.hpp) has summed them:
// non-linear element-wise functions (relu of an addend is not relu of the sum), norms and maxima,
// gather or redistribution as if final. Linear operations (scaling, adding partial sums over the same
// axes) stay correct and are allowed.
//
// The pending axes must be axes Layout replicates over: every rank along them holds an addend of the
// same block.
#include <array>
#include <cstddef>
#include <utility>

#include "shardwise/layout/layout.hpp"

namespace shardwise {

template <class Layout, std::size_t... Axes>
struct partial_sum {
  static_assert(sizeof...(Axes) > 0, "shardwise::partial_sum: name the mesh axes the pending sum runs over");
  static_assert(
      requires { Layout::splits_axis(std::size_t{0}); },
      "shardwise::partial_sum: the layout must say which mesh axes it cuts (a split<...> layout)");
  static_assert(
      (!Layout::splits_axis(Axes) && ...),
      "shardwise::partial_sum: a pending sum runs over mesh axes the layout replicates, not over axes it cuts");

  using final_layout = Layout;
  static constexpr std::array<std::size_t, sizeof...(Axes)> pending_axes{Axes...};
  static constexpr bool splits_axis(std::size_t a) { return Layout::splits_axis(a); }

  template <std::size_t D>
  using mapping = typename Layout::template mapping<D>;
};

namespace detail {
template <class Layout, class Axes>
struct partial_sum_over_axes;
template <class Layout, std::size_t... Axes>
struct partial_sum_over_axes<Layout, std::index_sequence<Axes...>> {
  using type = partial_sum<Layout, Axes...>;
};
}  // namespace detail

// Addends of Layout still to be summed over every axis of a mesh of D dimensions.
template <class Layout, std::size_t D>
using partial_sum_over_all = typename detail::partial_sum_over_axes<Layout, std::make_index_sequence<D>>::type;

template <class Layout>
inline constexpr bool is_partial_sum_v = false;
template <class Layout, std::size_t... Axes>
inline constexpr bool is_partial_sum_v<partial_sum<Layout, Axes...>> = true;

// The layout a tensor of Layout has once summed: Layout itself when it is no partial sum.
template <class Layout>
struct summed_layout {
  using type = Layout;
};
template <class Layout, std::size_t... Axes>
struct summed_layout<partial_sum<Layout, Axes...>> {
  using type = Layout;
};
template <class Layout>
using summed_layout_t = typename summed_layout<Layout>::type;

}  // namespace shardwise
