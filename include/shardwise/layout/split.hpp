#pragma once
// split<rows_over<...>, cols_over<...>, Padding>: the one generic layout. Each matrix dimension is cut
// over an ordered list of mesh axes (the first axis the most significant, like the digits of a number)
// and replicated over the axes neither list names. JAX writes PartitionSpec(('x', 'y'), 'z'); here it is
//
//   split<rows_over<0, 1>, cols_over<2>>     // rows over (x, y), x-major; columns over z
//
// With rows cut over axes (a, b), the part a rank holds is coords[a] * shape[b] + coords[b], and the
// part is cut from the rows by the Padding rule (padding.hpp). The named layouts are aliases:
//
//   replicated      every rank holds the whole matrix
//   row_1d          columns over axis 0: the input of Megatron's row-parallel linear, whose hidden
//                   dimension (the columns of the activations) is cut across the ranks
//   col_1d          rows over axis 0
//   block_2d        rows over axis 0 (the grid's rows), columns over axis 1 (SUMMA, Optimus)
//   cube_3d<...>::* the 3-D paper's balanced input, weight and output (cube_3d.hpp)
//
// Being aliases, equal layouts are equal types: cube_3d's output of one layer IS the input layout of
// the next, with no conversion written anywhere.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "shardwise/layout/layout.hpp"
#include "shardwise/layout/padding.hpp"
#include "shardwise/mesh/shape.hpp"

namespace shardwise {

// The mesh axes the rows (columns) are cut over, most significant first.
template <std::size_t... Axes>
struct rows_over {};
template <std::size_t... Axes>
struct cols_over {};

namespace detail {

// The refusal of axes beyond the mesh's, in a function of its own: Clang marks a class whose
// static_assert fails invalid, and the tensor holding the mapping would be refused a second time.
template <std::size_t D, std::size_t... Axes>
consteval bool axes_of_the_mesh() {
  static_assert(((Axes < D) && ...),
                "shardwise::split: the layout cuts over a mesh axis the mesh does not have (axes count from 0: "
                "a mesh of D dimensions, D in the instantiation above, has axes 0 to D - 1)");
  return true;
}

}  // namespace detail

template <class Rows, class Cols, class Padding = exact>
struct split {
  static_assert(sizeof(Rows) == 0,
                "shardwise::split<Rows, Cols, Padding>: Rows must be rows_over<axes...>, Cols cols_over<axes...> "
                "and Padding a padding rule (exact, padded or ragged)");
};

template <std::size_t... RowAxes, std::size_t... ColAxes, padding_rule Padding>
struct split<rows_over<RowAxes...>, cols_over<ColAxes...>, Padding> {
  using padding = Padding;
  static constexpr std::array<std::size_t, sizeof...(RowAxes)> row_axes{RowAxes...};
  static constexpr std::array<std::size_t, sizeof...(ColAxes)> col_axes{ColAxes...};

  // Whether either dimension is cut over mesh axis a (partial_sum asks: a pending sum must be over an
  // axis the layout replicates).
  static constexpr bool splits_axis(std::size_t a) { return ((RowAxes == a) || ...) || ((ColAxes == a) || ...); }

  template <std::size_t D>
  class mapping {
    static_assert(detail::axes_of_the_mesh<D, RowAxes..., ColAxes...>());
    static constexpr bool distinct_axes() {
      constexpr std::array<std::size_t, sizeof...(RowAxes) + sizeof...(ColAxes)> all{RowAxes..., ColAxes...};
      for (std::size_t a = 0; a < all.size(); ++a)
        for (std::size_t b = a + 1; b < all.size(); ++b)
          if (all[a] == all[b]) return false;
      return true;
    }
    static_assert(distinct_axes(), "shardwise::split: a mesh axis may cut only one dimension, once");

   public:
    static constexpr bool is_replicated = sizeof...(RowAxes) + sizeof...(ColAxes) < D;
    static constexpr bool is_balanced = Padding::is_balanced;

    mapping(matrix_extents extents, coordinates<D> grid)
        : extents_(extents), grid_(grid), row_parts_(parts(row_axes)), col_parts_(parts(col_axes)) {
      (void)matrix_elements(extents, -1, "layout");
      detail::check_cut<Padding>(
          extents.rows, row_parts_, "rows",
          "rows over mesh axes " + axes_string(row_axes) + " of the grid " + shape_string(grid_));
      detail::check_cut<Padding>(
          extents.cols, col_parts_, "columns",
          "columns over mesh axes " + axes_string(col_axes) + " of the grid " + shape_string(grid_));
    }

    [[nodiscard]] matrix_extents extents() const noexcept { return extents_; }
    [[nodiscard]] const coordinates<D>& grid() const noexcept { return grid_; }
    [[nodiscard]] int ranks() const noexcept { return grid_size(grid_); }
    [[nodiscard]] int block_count(int) const noexcept { return 1; }
    [[nodiscard]] int replicas() const noexcept {
      int count = 1;
      for (std::size_t a = 0; a < D; ++a)
        if (!splits_axis(a)) count *= grid_[a];
      return count;
    }

    [[nodiscard]] block_info block(int rank, int b) const {
      detail::check_block(rank, ranks(), b, 1);
      const coordinates<D> point = point_in_grid(grid_, rank);
      const piece rows = Padding::cut(extents_.rows, row_parts_, part_of(row_axes, point));
      const piece cols = Padding::cut(extents_.cols, col_parts_, part_of(col_axes, point));
      return {rows.offset, cols.offset, rows.extent, cols.extent, rows.stored, cols.stored};
    }

    [[nodiscard]] location owner(std::int64_t i, std::int64_t j) const {
      detail::check_index(extents_, i, j);
      const piece_index row = Padding::find(extents_.rows, row_parts_, i);
      const piece_index col = Padding::find(extents_.cols, col_parts_, j);
      coordinates<D> point{};  // replicated axes: coordinate 0, the lowest rank
      place(row_axes, row.piece, point);
      place(col_axes, col.piece, point);
      return {rank_in_grid(grid_, point), 0, row.local, col.local};
    }

   private:
    template <std::size_t N>
    std::int64_t parts(const std::array<std::size_t, N>& axes) const {
      std::int64_t count = 1;
      for (const std::size_t a : axes) count *= grid_[a];
      return count;
    }
    // The part a rank holds: its coordinates on `axes` read as mixed-radix digits, first most significant.
    template <std::size_t N>
    std::int64_t part_of(const std::array<std::size_t, N>& axes, const coordinates<D>& point) const {
      std::int64_t part = 0;
      for (const std::size_t a : axes) part = part * grid_[a] + point[a];
      return part;
    }
    // The inverse: write the digits of `part` into point's coordinates on `axes`.
    template <std::size_t N>
    void place(const std::array<std::size_t, N>& axes, std::int64_t part, coordinates<D>& point) const {
      for (std::size_t k = N; k-- > 0;) {
        point[axes[k]] = static_cast<int>(part % grid_[axes[k]]);
        part /= grid_[axes[k]];
      }
    }
    template <std::size_t N>
    static std::string axes_string(const std::array<std::size_t, N>& axes) {
      std::string text = "(";
      for (std::size_t k = 0; k < N; ++k) text += (k == 0 ? "" : ", ") + std::to_string(axes[k]);
      return text + ")";
    }

    matrix_extents extents_;
    coordinates<D> grid_;
    std::int64_t row_parts_;
    std::int64_t col_parts_;
  };
};

template <class L>
inline constexpr bool is_split_v = false;
template <class Rows, class Cols, class Padding>
inline constexpr bool is_split_v<split<Rows, Cols, Padding>> = true;

// A layout of the generic split<rows_over<...>, cols_over<...>, Padding> form, whose cuts are known from
// its type. What the products and the element-wise and row operations (ops/) require: they read the
// cuts off the type, so a layout written against the layout concept alone, whatever its members are
// called, is not one.
template <class L>
concept split_layout = is_split_v<L>;

template <class Padding = exact>
using replicated = split<rows_over<>, cols_over<>, Padding>;
template <class Padding = exact>
using row_1d = split<rows_over<>, cols_over<0>, Padding>;
template <class Padding = exact>
using col_1d = split<rows_over<0>, cols_over<>, Padding>;
template <class Padding = exact>
using block_2d = split<rows_over<0>, cols_over<1>, Padding>;

}  // namespace shardwise
