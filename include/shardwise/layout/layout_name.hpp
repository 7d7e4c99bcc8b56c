#pragma once
// How errors name layouts, in the words a user writes them (and shapes, with layout.hpp's
// extents_string):
//
//   layout_name<split<rows_over<>, cols_over<0>, padded>>()   "row_1d<padded>"
//   layout_name<cube_3d<>::weight>()                           "cube_3d<>::weight"
//   layout_name<partial_sum<replicated<>, 0>>()                "partial_sum<replicated<>, 0>"
//   layout_name<user::tiles<4>>()                              "user::tiles<4>" (as the compiler writes it)
//
// A split<...> that is one of the named aliases gets the alias's name; cube_3d's layouts are named
// under the paper's directions, or as cube_3d<>::swapped's (a layer's output and the next layer's
// input are one type, and named once, as the output).
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "shardwise/core/type_name.hpp"
#include "shardwise/layout/block_cyclic_2d.hpp"
#include "shardwise/layout/layout.hpp"
#include "shardwise/layout/padding.hpp"
#include "shardwise/layout/partial_sum.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/layout/vector_3d.hpp"

namespace shardwise {

namespace detail {

template <class Layout>
struct layout_naming {
  static std::string name() { return type_name<Layout>(); }
};

template <class Padding>
std::string padding_name() {
  if constexpr (std::is_same_v<Padding, padded>) return "padded";
  else if constexpr (std::is_same_v<Padding, ragged>)
    return "ragged";
  else if constexpr (std::is_same_v<Padding, exact>)
    return "";
  else
    return type_name<Padding>();
}

template <std::size_t N>
std::string axes_list(const std::array<std::size_t, N>& axes) {
  std::string text;
  for (std::size_t k = 0; k < N; ++k) text += (k == 0 ? "" : ", ") + std::to_string(axes[k]);
  return text;
}

template <std::size_t... RowAxes, std::size_t... ColAxes, class Padding>
struct layout_naming<split<rows_over<RowAxes...>, cols_over<ColAxes...>, Padding>> {
  static std::string name() {
    const std::string padding = padding_name<Padding>();
    const std::string arguments = "<" + padding + ">";
    const std::string cube = padding.empty() ? "cube_3d<>" : "cube_3d<directions<>, " + padding + ">";
    const std::array<std::size_t, sizeof...(RowAxes)> rows{RowAxes...};
    const std::array<std::size_t, sizeof...(ColAxes)> cols{ColAxes...};
    const auto is = [&](std::initializer_list<std::size_t> r, std::initializer_list<std::size_t> c) {
      return std::equal(rows.begin(), rows.end(), r.begin(), r.end()) &&
             std::equal(cols.begin(), cols.end(), c.begin(), c.end());
    };
    if (is({}, {})) return "replicated" + arguments;
    if (is({}, {0})) return "row_1d" + arguments;
    if (is({0}, {})) return "col_1d" + arguments;
    if (is({0}, {1})) return "block_2d" + arguments;
    // cube_3d<> has directions (1, 0, 2); its swapped twin (2, 0, 1) (cube_3d.hpp).
    if (is({0, 1}, {2})) return cube + "::input";
    if (is({2}, {1, 0})) return cube + "::weight";
    if (is({0, 2}, {1})) return cube + "::output";
    if (is({1}, {2, 0})) return cube + "::swapped::weight";
    return "split<rows_over<" + axes_list(rows) + ">, cols_over<" + axes_list(cols) + ">" +
           (padding.empty() ? "" : ", " + padding) + ">";
  }
};

template <class Layout, std::size_t... Axes>
struct layout_naming<partial_sum<Layout, Axes...>> {
  static std::string name() {
    return "partial_sum<" + layout_naming<Layout>::name() + ", " +
           axes_list(std::array<std::size_t, sizeof...(Axes)>{Axes...}) + ">";
  }
};

template <std::size_t Across, std::size_t Outer, std::size_t Diagonal, class Padding>
struct layout_naming<vector_3d<Across, Outer, Diagonal, Padding>> {
  static std::string name() {
    const std::string padding = padding_name<Padding>();
    return "vector_3d<" + axes_list(std::array<std::size_t, 3>{Across, Outer, Diagonal}) +
           (padding.empty() ? "" : ", " + padding) + ">";
  }
};

template <std::int64_t RowBlock, std::int64_t ColBlock>
struct layout_naming<block_cyclic_2d<RowBlock, ColBlock>> {
  static std::string name() {
    return "block_cyclic_2d<" + std::to_string(RowBlock) + ", " + std::to_string(ColBlock) + ">";
  }
};

}  // namespace detail

template <class Layout>
[[nodiscard]] std::string layout_name() {
  return detail::layout_naming<Layout>::name();
}

}  // namespace shardwise
