#pragma once
// Distributed matrix products, chosen by the operands' layout types (docs/tensor-parallel.md):
//
//   auto c  = matmul(a, b);                  // C = A·B
//   auto da = matmul(dc, transposed(b));     // A·Bᵀ   (the gradient of A)
//   auto db = matmul(transposed(a), dc);     // Aᵀ·B   (the gradient of B)
//
// The pair of layouts picks the algorithm and the result's layout:
//   3-D  cube_3d<D, P>::input · weight -> output, output · weightᵀ -> input, inputᵀ · output -> weight,
//        for any directions D (so cube_3d<D>::swapped works the same) on a 3-D mesh (ops/matmul_3d.hpp)
//   2-D  block_2d<P> for both operands and the result, SUMMA on a square 2-D mesh (ops/matmul_2d.hpp)
//   1-D  Megatron's column- and row-parallel products and their gradients, one dimension cut over
//        axis 0 (ops/matmul_1d.hpp); a cut inner dimension gives partial_sum<replicated<>, 0>
// Any other pair does not compile, and says so. Collective over the operands' mesh: every rank calls
// with the same shapes. Runtime misuse (inner dimensions that differ, operands on two meshes, SUMMA on
// a grid that is not square) throws on every rank.
#include <type_traits>

#include "shardwise/ops/local_product.hpp"
#include "shardwise/ops/matmul_1d.hpp"
#include "shardwise/ops/matmul_2d.hpp"
#include "shardwise/ops/matmul_3d.hpp"
#include "shardwise/tensor/dtensor.hpp"

namespace shardwise {

namespace detail {

// An operand of matmul: a dtensor, or transposed(dtensor).
template <class Operand>
struct product_operand;
template <class T, class Layout, class Mesh>
struct product_operand<dtensor<T, Layout, Mesh>> {
  using tensor_type = dtensor<T, Layout, Mesh>;
  static constexpr bool transposed = false;
  static const tensor_type& tensor(const tensor_type& t) { return t; }
};
template <class T, class Layout, class Mesh>
struct product_operand<transposed_view<dtensor<T, Layout, Mesh>>> {
  using tensor_type = dtensor<T, Layout, Mesh>;
  static constexpr bool transposed = true;
  static const tensor_type& tensor(const transposed_view<tensor_type>& t) { return t.tensor; }
};

template <class>
inline constexpr bool no_product_rule = false;

}  // namespace detail

template <class Operand>
concept matmul_operand = requires { typename detail::product_operand<Operand>::tensor_type; };

template <matmul_operand Left, matmul_operand Right>
[[nodiscard]] auto matmul(const Left& left_operand, const Right& right_operand) {
  using left_traits = detail::product_operand<Left>;
  using right_traits = detail::product_operand<Right>;
  using left_tensor = typename left_traits::tensor_type;
  using right_tensor = typename right_traits::tensor_type;
  using T = typename left_tensor::value_type;
  using Mesh = typename left_tensor::mesh_type;
  using L = typename left_tensor::layout_type;
  using R = typename right_tensor::layout_type;
  constexpr bool tl = left_traits::transposed;
  constexpr bool tr = right_traits::transposed;
  static_assert(std::is_same_v<T, typename right_tensor::value_type>,
                "shardwise::matmul: both operands must have the same element type");
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "shardwise::matmul: products are computed on float or double matrices");
  static_assert(std::is_same_v<Mesh, typename right_tensor::mesh_type>,
                "shardwise::matmul: both operands must live on the same process_mesh");
  static_assert(!(tl && tr),
                "shardwise::matmul: A^T*B^T is not one of the product forms (A*B, A*B^T, A^T*B); compute B*A "
                "and use its transpose");
  const auto& left = left_traits::tensor(left_operand);
  const auto& right = right_traits::tensor(right_operand);

  if constexpr (Mesh::dimensions == 3 && detail::cube_product<L, R, tl, tr>::exists) {
    return detail::cube_matmul<tl, tr>(left, right);
  } else if constexpr (Mesh::dimensions == 2 && detail::summa_product<L, R, tl, tr>::exists) {
    return detail::summa_matmul<tl, tr>(left, right);
  } else if constexpr (detail::megatron_product<L, R, tl, tr>::exists) {
    return detail::megatron_matmul<tl, tr>(left, right);
  } else {
    static_assert(detail::no_product_rule<L>,
                  "shardwise::matmul: no distributed product for these layouts (L and R in the instantiation "
                  "above; tl, tr say which is transposed); see docs/tensor-parallel.md for the layout pairs the "
                  "1-D, 2-D and 3-D products take and the layout each returns");
  }
}

}  // namespace shardwise
