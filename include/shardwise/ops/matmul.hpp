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
// Any other pair does not compile, and says so; a layout not of the split<...> form (block_cyclic_2d,
// vector_3d, a user's own) is refused with a message that names that requirement. Collective over the
// operands' mesh: every rank calls with the same shapes. Runtime misuse (inner dimensions that differ,
// operands on two meshes, SUMMA on a grid that is not square) throws on every rank.
//
//   auto c = matmul(a, b, {.chunks = 4});    // the 3-D product pipelined in 4 bands of rows
//
// matmul_options::chunks cuts the 3-D product into bands of rows (ops/matmul_3d_in_bands.hpp): the left
// operand's all-gather of band j + 1 travels while band j is multiplied, and band j's reduce-scatter
// is started as soon as its rows are; 1, the default, is the plain product: the two all-gathers, one
// GEMM, one reduce-scatter. Every rank passes the same options, as it passes the same shapes.
// The 1-D and 2-D products have no such collectives to cut and ignore it; the 1-D products decomposed
// into rings of sends are all_gather_matmul and matmul_reduce_scatter (ops/collective_matmul.hpp).
#include <string>
#include <type_traits>

#include "shardwise/layout/partial_sum.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/ops/local_product.hpp"
#include "shardwise/ops/matmul_1d.hpp"
#include "shardwise/ops/matmul_2d.hpp"
#include "shardwise/ops/matmul_3d.hpp"
#include "shardwise/tensor/describe.hpp"
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
  static std::string describe(const tensor_type& t) { return shardwise::describe(t); }
};
template <class T, class Layout, class Mesh>
struct product_operand<transposed_view<dtensor<T, Layout, Mesh>>> {
  using tensor_type = dtensor<T, Layout, Mesh>;
  static constexpr bool transposed = true;
  static const tensor_type& tensor(const transposed_view<tensor_type>& t) { return t.tensor; }
  static std::string describe(const transposed_view<tensor_type>& t) {
    return "transposed(" + shardwise::describe(t.tensor) + ")";
  }
};

// Rethrows the error being handled as one inside product `name` of the two operands (a catch handler).
template <class Left, class Right>
[[noreturn]] void rethrow_within_product(std::string_view name, const Left& left, const Right& right,
                                         const std::string& options = "") {
  const auto& tensor = product_operand<Left>::tensor(left);
  const std::string operands = product_operand<Left>::describe(left) + ", " + product_operand<Right>::describe(right);
  rethrow_within_call(world_rank_of(tensor),
                      options.empty() ? call_text(name, operands) : call_text(name, operands, options));
}

template <class>
inline constexpr bool no_product_rule = false;

// What a refused product returns past its static_assert: an operand stands in for the result, so
// that the code using it compiles and the refusal is the build's one error.
template <class Tensor>
[[nodiscard]] Tensor stand_in_for_refused_product(const Tensor& operand) {
  return operand;
}

// What every distributed product asks of its pair of operands (matmul, and the collective products of
// ops/collective_matmul.hpp): one element type, float or double, one mesh, at most one transposed.
template <class Left, class Right>
struct product_pair {
  using left_tensor = typename product_operand<Left>::tensor_type;
  using right_tensor = typename product_operand<Right>::tensor_type;
  using value_type = typename left_tensor::value_type;
  using mesh_type = typename left_tensor::mesh_type;
  using left_layout = typename left_tensor::layout_type;
  using right_layout = typename right_tensor::layout_type;
  static constexpr bool transpose_left = product_operand<Left>::transposed;
  static constexpr bool transpose_right = product_operand<Right>::transposed;
  static_assert(std::is_same_v<value_type, typename right_tensor::value_type>,
                "shardwise: both operands of a product must have the same element type");
  static_assert(value_element<value_type>, "shardwise: products are computed on float, double or bf16 matrices");
  static_assert(std::is_same_v<mesh_type, typename right_tensor::mesh_type>,
                "shardwise: both operands of a product must live on the same process_mesh");
  static_assert(!(transpose_left && transpose_right),
                "shardwise: A^T*B^T is not one of the product forms (A*B, A*B^T, A^T*B); compute B*A and use its "
                "transpose");
};

}  // namespace detail

template <class Operand>
concept matmul_operand = requires { typename detail::product_operand<Operand>::tensor_type; };

// How a 1-D collective product (ops/collective_matmul.hpp) moves the operand it gathers or the sum it
// scatters: in a ring whose transfers overlap the GEMMs, or as one whole collective before (or after)
// the GEMM. automatic leaves it to a layer's first calls, which run both and keep the faster
// (ops/collective_matmul_choice.hpp).
enum class collective_matmul_form { ring, unfused, automatic };

// How a product may run; every choice gives the same result (up to the order of float sums).
struct matmul_options {
  // Bands of rows the 3-D product is pipelined in: the left operand gathered, multiplied and the sums
  // reduce-scattered band by band.
  int chunks = 1;
  // The form of the collective products of a layer whose input or output has its rows cut (nn::linear).
  collective_matmul_form collective = collective_matmul_form::ring;
  // When SUMMA's broadcasts travel: ahead of the products that read them, or in turn (ops/matmul_2d.hpp).
  summa_broadcasts summa = summa_broadcasts::ahead;

  friend bool operator==(const matmul_options&, const matmul_options&) = default;
};

namespace detail {

// The options a product was called with that are not the defaults, as its errors name them.
inline std::string options_text(const matmul_options& options) {
  std::string text = options.chunks == 1 ? "" : "chunks " + std::to_string(options.chunks);
  if (options.summa == summa_broadcasts::in_turn) text += (text.empty() ? "" : ", ") + std::string("SUMMA in turn");
  return text;
}

}  // namespace detail

template <matmul_operand Left, matmul_operand Right>
[[nodiscard]] auto matmul(const Left& left_operand, const Right& right_operand, matmul_options options = {}) try {
  using pair = detail::product_pair<Left, Right>;
  using Mesh = typename pair::mesh_type;
  using L = typename pair::left_layout;
  using R = typename pair::right_layout;
  constexpr bool tl = pair::transpose_left;
  constexpr bool tr = pair::transpose_right;
  const auto& left = detail::product_operand<Left>::tensor(left_operand);
  const auto& right = detail::product_operand<Right>::tensor(right_operand);
  if (options.chunks < 1)
    throw argument_error(left.mesh().world().world_rank(), "matmul",
                         "matmul_options::chunks is " + std::to_string(options.chunks) + "; it must be at least 1");

  // A layout written against the layout concept alone says where its blocks lie only at run time; the
  // product rules need the cuts in the type.
  constexpr bool split_operands = (split_layout<L> || is_partial_sum_v<L>) && (split_layout<R> || is_partial_sum_v<R>);
  if constexpr (!split_operands) {
    static_assert(split_operands,
                  "shardwise::matmul: products take layouts of the split<rows_over<...>, cols_over<...>, Padding> "
                  "form (replicated, row_1d, col_1d, block_2d, cube_3d<...>::input, weight, output), whose cuts they "
                  "read off the type; L or R in the instantiation above is a layout written against the layout "
                  "concept alone (block_cyclic_2d, vector_3d or your own): redistribute<row_1d<>>(t), or into "
                  "another split layout, first (docs/layouts.md, \"Layouts of your own\")");
    return detail::stand_in_for_refused_product(left);
  } else if constexpr (Mesh::dimensions == 3 && detail::cube_product<L, R, tl, tr>::exists) {
    return detail::cube_matmul<tl, tr>(left, right, options.chunks);
  } else if constexpr (Mesh::dimensions == 2 && detail::summa_product<L, R, tl, tr>::exists) {
    return detail::summa_matmul<tl, tr>(left, right, options.summa);
  } else if constexpr (detail::megatron_product<L, R, tl, tr>::exists) {
    return detail::megatron_matmul<tl, tr>(left, right);
  } else {
    static_assert(detail::no_product_rule<L>,
                  "shardwise::matmul: no distributed product for these layouts (L and R in the instantiation "
                  "above; tl, tr say which is transposed); see docs/tensor-parallel.md for the layout pairs the "
                  "1-D, 2-D and 3-D products take and the layout each returns");
    return detail::stand_in_for_refused_product(left);
  }
} catch (...) {
  detail::rethrow_within_product("matmul", left_operand, right_operand, detail::options_text(options));
}

}  // namespace shardwise
