#pragma once
// The two linears of a Transformer sub-block in a tensor-parallel family (nn/family.hpp): the first
// takes the input layout to the hidden one, the second takes it back. self_attention and mlp are both
// built on it, so the family's checks and the sum of the input gradients are written once.
#include <type_traits>
#include <utility>

#include "shardwise/nn/family.hpp"
#include "shardwise/nn/linear.hpp"
#include "shardwise/tensor/distribute.hpp"

namespace shardwise::nn {

namespace detail {

// The family's refusal, in a function of its own: Clang marks a class whose static_assert fails invalid
// and then reports each of its members missing, where a failed function is one error.
template <class Family, class Mesh>
consteval bool family_fits_the_mesh() {
  constexpr bool fits = tensor_parallel_family<Family, Mesh::dimensions>;
  static_assert(fits,
                "shardwise::nn: the family (nn/family.hpp) is for meshes of another number of dimensions than "
                "this mesh: tensor_parallel_1d, _2d, _3d need 1-, 2- and 3-D meshes");
  return fits;
}

}  // namespace detail

template <class T, class Family, class Mesh>
struct sub_block_linears {
  static constexpr bool family_fits = detail::family_fits_the_mesh<Family, Mesh>();
  // Past a refused family, the library's family of the mesh's dimensions stands in, so that the
  // refusal is the build's one error.
  using family = std::conditional_t<family_fits, Family, detail::library_family<Mesh::dimensions>>;
  using input_layout = typename family::input;
  using first = linear<T, input_layout, typename family::first_weight, Mesh>;
  using second = linear<T, typename family::hidden, typename family::second_weight, Mesh, input_layout>;
  static_assert(std::is_same_v<typename first::output_layout, typename family::hidden> &&
                    std::is_same_v<typename second::output_layout, input_layout>,
                "shardwise::nn: a family's first linear must take its input layout to its hidden "
                "layout and the second take that back, so that sub-blocks and blocks stack");

  using input_type = dtensor<T, input_layout, Mesh>;

  // The first linears' input gradients, added while their sum was pending (first::backward_sharing_input),
  // summed into the input layout by one reduction: an all-reduce (1-D); nothing where the products sum
  // inside them (2-D, 3-D) or the ring has reduce-scattered the sum (sequence parallelism).
  template <class Addends>
  [[nodiscard]] static input_type input_gradient(Addends&& gradient) {
    return redistribute<input_layout>(std::forward<Addends>(gradient));
  }
};

}  // namespace shardwise::nn
