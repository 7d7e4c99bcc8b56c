#pragma once
// cube_3d: the load-balanced layouts of the 3-D paper (Bian et al., section 3.1.1) on a
// p_x x p_y x p_z grid, coordinates (i, j, l) = (x, y, z). With the paper's directions (y, x, z) for
// (A, B, C) and m = M/p^2, n = N/p^2, k = K/p^2 on a p x p x p cube:
//
//   input  A_ijl = A[i*m*p + j*m : +m,  l*n*p : +n*p]      rows over (x, y), columns over z
//   weight B_lji = B[l*n*p : +n*p,  j*k*p + i*k : +k]      rows over z,      columns over (y, x)
//   output C_ilj = C[i*m*p + l*m : +m,  j*k*p : +k*p]      rows over (x, z), columns over y
//   vector b_ji on ranks with j == l                         (vector_3d.hpp)
//
// Every rank holds 1/P of each matrix (plus the padding rule's rounding). Written with the directions
// as parameters — A's all-gather axis, B's all-gather axis, C's reduce-scatter axis — the output of a
// layer with directions (y, x, z) is, as a type, the input of the next layer with directions (z, x, y):
//
//   static_assert(std::is_same_v<cube_3d<>::output, cube_3d<>::swapped::input>);
//
// which is the paper's "exchange the directions y and z after each linear layer", checked by the
// compiler. Works on rectangular grids: each dimension is cut into the product of its axes' extents.
#include <algorithm>
#include <cstddef>

#include "shardwise/layout/padding.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/layout/vector_3d.hpp"

namespace shardwise {

// The mesh axes of the 3-D algorithm: A gathers over InputAxis, B over WeightAxis, C is reduce-scattered
// over OutputAxis. The paper's default is (y, x, z) = (1, 0, 2).
template <std::size_t InputAxis = 1, std::size_t WeightAxis = 0, std::size_t OutputAxis = 2>
struct directions {
  static_assert(InputAxis < 3 && WeightAxis < 3 && OutputAxis < 3 && InputAxis != WeightAxis &&
                    InputAxis != OutputAxis && WeightAxis != OutputAxis,
                "shardwise::directions: the three directions must be the axes 0, 1, 2 of a 3-D mesh, each once");
  static constexpr std::size_t input = InputAxis;
  static constexpr std::size_t weight = WeightAxis;
  static constexpr std::size_t output = OutputAxis;
};

template <class Directions = directions<>, padding_rule Padding = exact>
struct cube_3d {
  static constexpr std::size_t a = Directions::input;
  static constexpr std::size_t b = Directions::weight;
  static constexpr std::size_t c = Directions::output;

  using input = split<rows_over<b, a>, cols_over<c>, Padding>;
  using weight = split<rows_over<c>, cols_over<a, b>, Padding>;
  using output = split<rows_over<b, c>, cols_over<a>, Padding>;
  using vector = vector_3d<b, std::min(a, c), std::max(a, c), Padding>;
  // The next layer's directions: input and output axes exchanged, weight axis kept.
  using swapped = cube_3d<directions<c, b, a>, Padding>;
};

}  // namespace shardwise
