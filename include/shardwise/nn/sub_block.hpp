#pragma once
// The two linears of a Transformer sub-block in a tensor-parallel family (nn/family.hpp): the first
// takes the input layout to the hidden one, the second takes it back. self_attention and mlp are both
// built on it, so the family's checks are written once.
#include <type_traits>

#include "shardwise/nn/family.hpp"
#include "shardwise/nn/linear.hpp"

namespace shardwise::nn {

template <class T, class Family, class Mesh>
struct sub_block_linears {
  static_assert(tensor_parallel_family<Family, Mesh::dimensions>,
                "shardwise::nn: the family (nn/family.hpp) is for meshes of another number of dimensions than "
                "this mesh: tensor_parallel_1d, _2d, _3d need 1-, 2- and 3-D meshes");
  using first = linear<T, typename Family::input, typename Family::first_weight, Mesh>;
  using second = linear<T, typename Family::hidden, typename Family::second_weight, Mesh>;
  static_assert(std::is_same_v<typename first::output_layout, typename Family::hidden> &&
                    std::is_same_v<typename second::output_layout, typename Family::input>,
                "shardwise::nn: a family's first linear must take its input layout to its hidden layout and the "
                "second take that back, so that sub-blocks and blocks stack");
};

}  // namespace shardwise::nn
