#pragma once
// The layouts of a vector that meets a matrix column by column (a bias b in A + b, a scale in A ∘ b,
// layer norm's gamma and beta), chosen from the matrix's layout type:
//
//   broadcast_vector_layout_t<L>   what each rank needs to apply the vector to its block: b cut exactly
//                                  as L cuts the columns (same axes, same padding rule), replicated over
//                                  every other axis. The vector's block then lines up with the matrix
//                                  block's columns, so A + b is local.
//   vector_layout_t<L>             where the vector lives between steps (a parameter, a gradient). For
//                                  1-D and 2-D layouts, the broadcast layout itself. For the 3-D paper's
//                                  cube layouts (rows over two mesh axes, columns over the third), the
//                                  diagonal vector_3d storage of the paper's Figure 5: 1/p² of the
//                                  vector on the ranks with j == l, nothing elsewhere; ops/ broadcast it
//                                  before use and reduce its gradient back (ops/vector_broadcast.hpp).
//   column_sums_layout_t<L>        the column sums of an L matrix, each rank having summed its own rows:
//                                  the broadcast layout, still a partial sum over L's row axes
//                                  (layout/partial_sum.hpp), or final when L does not cut the rows.
//
//   static_assert(std::is_same_v<vector_layout_t<block_2d<padded>>, split<rows_over<>, cols_over<1>, padded>>);
//   static_assert(std::is_same_v<vector_layout_t<cube_3d<>::input>, cube_3d<>::vector>);
//
// Vectors are 1 x N matrices. Only split<...> layouts have these traits: the axes are read off the type.
#include <algorithm>
#include <cstddef>
#include <type_traits>

#include "shardwise/layout/padding.hpp"
#include "shardwise/layout/partial_sum.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/layout/vector_3d.hpp"

namespace shardwise {

namespace detail {

// Empty for other layouts, so that a constraint on the trait fails quietly (the ops state split_layout).
template <class L>
struct vector_layouts {};

template <std::size_t... RowAxes, std::size_t... ColAxes, class Padding>
struct vector_layouts<split<rows_over<RowAxes...>, cols_over<ColAxes...>, Padding>> {
  using broadcast = split<rows_over<>, cols_over<ColAxes...>, Padding>;
  using storage = broadcast;
  // Naming partial_sum<broadcast> with no axes does not instantiate it, so its check stays quiet.
  using column_sums = std::conditional_t<sizeof...(RowAxes) == 0, broadcast, partial_sum<broadcast, RowAxes...>>;
};

// The cube: rows over (Across, R), columns over C. The paper's diagonal is R == C; vector_3d names the
// two diagonal axes in increasing order, so the input and output of one cube_3d share one vector type.
template <std::size_t Across, std::size_t R, std::size_t C, class Padding>
struct vector_layouts<split<rows_over<Across, R>, cols_over<C>, Padding>> {
  using broadcast = split<rows_over<>, cols_over<C>, Padding>;
  using storage = vector_3d<Across, std::min(R, C), std::max(R, C), Padding>;
  using column_sums = partial_sum<broadcast, Across, R>;
};

}  // namespace detail

template <class L>
using broadcast_vector_layout_t = typename detail::vector_layouts<L>::broadcast;
template <class L>
using vector_layout_t = typename detail::vector_layouts<L>::storage;
template <class L>
using column_sums_layout_t = typename detail::vector_layouts<L>::column_sums;

}  // namespace shardwise
