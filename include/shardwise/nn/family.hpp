#pragma once
// The three tensor-parallel families of a Transformer layer, as layout types. A layer (nn/) is built
// from two kinds of linear: the first of a sub-block (the Q/K/V projections, the MLP's expansion) takes
// the layer's input and gives the hidden activations; the second (the attention's output projection,
// the MLP's contraction) takes them back to the input's layout, so that blocks stack:
//
//   family               input            first weight          hidden            second weight
//   tensor_parallel_1d   replicated       row_1d (columns cut)  row_1d            col_1d (rows cut)   Megatron
//   sequence_parallel_1d col_1d (rows cut) row_1d               row_1d            col_1d              Megatron-SP
//   tensor_parallel_2d   block_2d         block_2d              block_2d          block_2d            SUMMA (Optimus)
//   tensor_parallel_3d   cube::input      cube::weight          cube::output      cube::swapped::weight
//
// A language model's vocabulary (its embedding table, vocabulary x hidden) is cut by rows over the whole
// tensor-parallel mesh, as Megatron's VocabParallelEmbedding: `vocabulary`, ragged so that any
// vocabulary size works on any group (a rank may hold one row more than another).
//
// With sequence parallelism (Megatron-LM's; Korthikanti et al., "Reducing Activation Recomputation in
// Large Transformer Models") the activations between the sub-blocks are cut by rows, tokens, over the
// axis: layer norms, residuals and what they keep hold 1/P of the tokens. The first linears' products
// gather their input (all_gather_matmul, ops/collective_matmul.hpp), one ring for all the first linears
// of a sub-block (Q, K and V; linear::forward_sharing_input), in the forward and again in the backward,
// where one ring reduce-scatters the sum of their input gradients into `input`; the second linear
// reduce-scatters its sum straight into `input`. A forward moves the bytes of tensor_parallel_1d's
// all-reduces; a backward gathers the input again and the second linear's output gradient once.
//
// In 3-D the hidden layout IS cube::swapped::input (the paper's exchange of the y and z directions
// after the first linear), and the second linear, in the swapped cube, gives swapped::output, which IS
// cube::input again: the types carry the swap, and a block's output has its input's layout.
#include <algorithm>
#include <cstddef>
#include <tuple>

#include "shardwise/layout/cube_3d.hpp"
#include "shardwise/layout/padding.hpp"
#include "shardwise/layout/split.hpp"

namespace shardwise::nn {

template <padding_rule Padding = exact>
struct tensor_parallel_1d {
  static constexpr std::size_t mesh_dimensions = 1;
  using input = replicated<>;  // nothing is cut, so no padding rule applies: the products' sums give this
  using first_weight = row_1d<Padding>;
  using hidden = row_1d<Padding>;
  using second_weight = col_1d<Padding>;
  using vocabulary = split<rows_over<0>, cols_over<>, ragged>;
};

template <padding_rule Padding = exact>
struct sequence_parallel_1d {
  static constexpr std::size_t mesh_dimensions = 1;
  using input = col_1d<Padding>;
  using first_weight = row_1d<Padding>;
  using hidden = row_1d<Padding>;
  using second_weight = col_1d<Padding>;
  using vocabulary = split<rows_over<0>, cols_over<>, ragged>;
};

template <padding_rule Padding = exact>
struct tensor_parallel_2d {
  static constexpr std::size_t mesh_dimensions = 2;
  using input = block_2d<Padding>;
  using first_weight = block_2d<Padding>;
  using hidden = block_2d<Padding>;
  using second_weight = block_2d<Padding>;
  using vocabulary = split<rows_over<0, 1>, cols_over<>, ragged>;
};

template <class Directions = directions<>, padding_rule Padding = exact>
struct tensor_parallel_3d {
  using cube = cube_3d<Directions, Padding>;
  static constexpr std::size_t mesh_dimensions = 3;
  using input = typename cube::input;
  using first_weight = typename cube::weight;
  using hidden = typename cube::output;
  using second_weight = typename cube::swapped::weight;
  using vocabulary = split<rows_over<0, 1, 2>, cols_over<>, ragged>;
};

// Family F describes a Transformer layer on meshes of D dimensions.
template <class F, std::size_t D>
concept tensor_parallel_family = requires {
  typename F::input;
  typename F::first_weight;
  typename F::hidden;
  typename F::second_weight;
  typename F::vocabulary;
} && F::mesh_dimensions == D;

namespace detail {

// The library's family for meshes of D dimensions (beyond 3, the 3-D one): what stands in for a
// refused family, so that its refusal is the build's one error.
template <std::size_t D>
using library_family =
    std::tuple_element_t<std::clamp<std::size_t>(D, 1, 3) - 1,
                         std::tuple<tensor_parallel_1d<>, tensor_parallel_2d<>, tensor_parallel_3d<>>>;

}  // namespace detail

}  // namespace shardwise::nn
