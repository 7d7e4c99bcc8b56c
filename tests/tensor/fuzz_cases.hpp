#pragma once
// The layout fuzz test's cases (tensor/fuzz_test.cpp describes the campaign): the catalogues of layouts and
// product forms for meshes of 1, 2 and 3 dimensions, drawing a case, and running it on every rank. The
// layouts and the products of each mesh dimension compile in sources of their own (`extern template` at
// the end).
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "ops/matmul_checks.hpp"
#include "shardwise/layout/block_cyclic_2d.hpp"
#include "shardwise/layout/check_layout.hpp"
#include "shardwise/layout/cube_3d.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/layout/vector_3d.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/mesh/shape.hpp"
#include "shardwise/ops/matmul.hpp"
#include "shardwise/tensor/distribute.hpp"
#include "shardwise/tensor/dtensor.hpp"
#include "support/backends.hpp"
#include "support/test_layouts.hpp"

namespace shardwise::testing::fuzz {

namespace checks = shardwise::testing;
using checks::matrix;

// A layout written against the concept alone, as a user would: rank r holds rows r, r + P, r + 2P, ...
// of any mesh's P ranks, each row a block of its own, stored one column wider than it is (padding).
struct cyclic_rows {
  template <std::size_t D>
  class mapping : public checks::test_mapping_base<D> {
    using checks::test_mapping_base<D>::extents_;
    using checks::test_mapping_base<D>::p_;

   public:
    static constexpr bool is_replicated = false;
    static constexpr bool is_balanced = false;
    using checks::test_mapping_base<D>::test_mapping_base;
    [[nodiscard]] int replicas() const { return 1; }
    [[nodiscard]] int block_count(int rank) const {
      return static_cast<int>(extents_.rows > rank ? ceil_divide(extents_.rows - rank, p_) : 0);
    }
    [[nodiscard]] block_info block(int rank, int b) const {
      return {rank + std::int64_t{b} * p_, 0, 1, extents_.cols, 1, extents_.cols + 1};
    }
    [[nodiscard]] location owner(std::int64_t i, std::int64_t j) const {
      return {static_cast<int>(i % p_), static_cast<int>(i / p_), 0, j};
    }
  };
};

template <class... Ts>
struct type_list {
  static constexpr std::size_t size = sizeof...(Ts);
};

// f.template operator()<T>() for the index-th type of the list.
template <class... Ts, class F>
void visit(type_list<Ts...>, std::size_t index, F&& f) {
  std::size_t k = 0;
  (void)((k++ == index ? (f.template operator()<Ts>(), true) : false) || ...);
}

// "split<rows_over<>, cols_over<0>, padded>": a type's name, as the compiler spells it, without namespaces.
template <class T>
std::string type_name() {
  const std::string_view signature = __PRETTY_FUNCTION__;
  const std::size_t first = signature.find("T = ") + 4;
  std::string name(signature.substr(first, signature.find_first_of(";]", first) - first));
  for (std::size_t at; (at = name.find("shardwise::")) != std::string::npos;) name.erase(at, 11);
  for (std::size_t at; (at = name.find("testing::fuzz::")) != std::string::npos;) name.erase(at, 15);
  return name;
}

// op(left) · op(right), each operand in its layout; Square: SUMMA, which needs a square grid.
template <class Left, class Right, bool TransposeLeft, bool TransposeRight, bool Square = false>
struct product_form {
  using left = Left;
  using right = Right;
  static constexpr bool transpose_left = TransposeLeft;
  static constexpr bool transpose_right = TransposeRight;
  static constexpr bool square_grid = Square;
};

// Megatron's column-parallel Y = X·W, its dX = dY·Wᵀ (a partial sum) and dW = Xᵀ·dY; the row-parallel
// Y = X·W (a partial sum), its dX and dW.
template <class P>
using megatron_forms =
    type_list<product_form<replicated<>, row_1d<P>, false, false>, product_form<row_1d<P>, row_1d<P>, false, true>,
              product_form<replicated<>, row_1d<P>, true, false>, product_form<row_1d<P>, col_1d<P>, false, false>,
              product_form<replicated<>, col_1d<P>, false, true>, product_form<row_1d<P>, replicated<>, true, false>>;
template <class P>
using summa_forms = type_list<product_form<block_2d<P>, block_2d<P>, false, false, true>,
                              product_form<block_2d<P>, block_2d<P>, false, true, true>,
                              product_form<block_2d<P>, block_2d<P>, true, false, true>>;
template <class Cube>
using cube_forms = type_list<product_form<typename Cube::input, typename Cube::weight, false, false>,
                             product_form<typename Cube::output, typename Cube::weight, false, true>,
                             product_form<typename Cube::input, typename Cube::output, true, false>>;

template <class... Lists>
struct joined;
template <class... Ts>
struct joined<type_list<Ts...>> {
  using type = type_list<Ts...>;
};
template <class... Ts, class... Us, class... Rest>
struct joined<type_list<Ts...>, type_list<Us...>, Rest...> {
  using type = typename joined<type_list<Ts..., Us...>, Rest...>::type;
};
template <class... Lists>
using join = typename joined<Lists...>::type;

// What a mesh of D dimensions is fuzzed with.
template <std::size_t D>
struct catalogue;
template <>
struct catalogue<1> {
  using layouts = type_list<replicated<>, row_1d<>, row_1d<padded>, row_1d<ragged>, col_1d<>, col_1d<padded>,
                            col_1d<ragged>, cyclic_rows>;
  using products = join<
      megatron_forms<padded>, megatron_forms<ragged>,
      type_list<product_form<replicated<>, row_1d<>, false, false>, product_form<row_1d<>, col_1d<>, false, false>>>;
};
template <>
struct catalogue<2> {
  using layouts =
      type_list<replicated<ragged>, row_1d<padded>, col_1d<ragged>, block_2d<>, block_2d<padded>, block_2d<ragged>,
                split<rows_over<1, 0>, cols_over<>, padded>, block_cyclic_2d<2, 3>, block_cyclic_2d<1>, cyclic_rows>;
  using products = join<summa_forms<exact>, summa_forms<padded>, summa_forms<ragged>,
                        type_list<product_form<replicated<>, row_1d<ragged>, false, false>,
                                  product_form<row_1d<padded>, col_1d<padded>, false, false>>>;
};
template <>
struct catalogue<3> {
  using padded_cube = cube_3d<directions<>, padded>;
  using layouts = type_list<replicated<>, cube_3d<>::input, cube_3d<>::weight, cube_3d<>::output, padded_cube::input,
                            padded_cube::weight, padded_cube::output, cube_3d<directions<2, 1, 0>, ragged>::input,
                            padded_cube::vector, split<rows_over<2>, cols_over<0>, ragged>, cyclic_rows>;
  using products = join<cube_forms<cube_3d<>>, cube_forms<padded_cube>, cube_forms<cube_3d<directions<>, ragged>>,
                        cube_forms<cube_3d<directions<0, 2, 1>, padded>>,
                        type_list<product_form<row_1d<ragged>, col_1d<ragged>, false, false>>>;
};

// ---- the cases

enum class shape_kind { row_vector, column_vector, primes, fewer_elements_than_ranks, empty, divisible, any };
inline constexpr std::array<const char*, 7> kind_names{
    "1xN", "Nx1", "primes", "fewer elements than ranks", "empty", "divisible by P", "any"};

struct fuzz_case {
  std::int64_t index = 0;
  int ranks = 1;
  std::size_t dimensions = 1;
  std::array<int, 3> grid{};
  shape_kind kind = shape_kind::any;
  matrix_extents shape;
  std::size_t from = 0;  // layouts, by index in catalogue<dimensions>::layouts
  std::size_t to = 0;
  int scatter_root = 0;
  int gather_root = 0;
  int refused_layouts = 0;   // of the catalogue, those whose mapping refused the shape on the grid
  bool user_layout = false;  // cyclic_rows is one of the two layouts
  int product = -1;          // by index in catalogue<dimensions>::products; -1: none fits
  std::int64_t m = 0, k = 0, n = 0;
  int chunks = 1;
  std::string description;
};

class generator {
 public:
  generator(std::uint64_t seed, std::int64_t index)
      : random_(seed * 0x9E3779B97F4A7C15ULL + static_cast<std::uint64_t>(index)) {}
  std::int64_t between(std::int64_t low, std::int64_t high) {
    return std::uniform_int_distribution<std::int64_t>(low, high)(random_);
  }
  template <class Container>
  auto pick(const Container& choices) {
    return choices[static_cast<std::size_t>(between(0, static_cast<std::int64_t>(choices.size()) - 1))];
  }

 private:
  std::mt19937_64 random_;
};

inline constexpr std::array<std::int64_t, 12> primes{2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37};

// An extent as the kind has it (for the dimension that is not the vector's length in 1xN and Nx1).
inline std::int64_t extent(generator& g, shape_kind kind, int ranks) {
  switch (kind) {
    case shape_kind::primes: return g.pick(primes);
    case shape_kind::divisible: return ranks * g.between(1, std::max<std::int64_t>(1, 48 / ranks));
    case shape_kind::empty: return g.between(0, 1) == 0 ? 0 : g.between(0, 9);
    default: return g.between(1, 30);
  }
}

inline matrix_extents draw_shape(generator& g, shape_kind kind, int ranks) {
  switch (kind) {
    case shape_kind::row_vector: return {1, g.between(1, 40)};
    case shape_kind::column_vector: return {g.between(1, 40), 1};
    case shape_kind::fewer_elements_than_ranks: {
      if (ranks == 1) return {0, g.between(0, 3)};
      const std::int64_t elements = g.between(1, ranks - 1);
      const std::int64_t rows = g.pick(std::array<std::int64_t, 2>{1, elements});
      return {rows, elements / rows};
    }
    case shape_kind::empty: {
      const std::int64_t other = g.between(0, 9);
      return g.between(0, 1) == 0 ? matrix_extents{0, other} : matrix_extents{other, 0};
    }
    default: return {extent(g, kind, ranks), extent(g, kind, ranks)};
  }
}

template <class Layout, std::size_t D>
bool accepts(const matrix_extents& shape, const coordinates<D>& grid) {
  try {
    (void)mapping_t<Layout, D>(shape, grid);
    return true;
  } catch (const shardwise::error&) {
    return false;
  }
}

// The form's product of two tensors in its layouts.
template <class Form, class Left, class Right>
auto multiply(const Left& left, const Right& right, matmul_options options) {
  if constexpr (Form::transpose_left) {
    return matmul(transposed(left), right, options);
  } else if constexpr (Form::transpose_right) {
    return matmul(left, transposed(right), options);
  } else {
    return matmul(left, right, options);
  }
}

// The layout the form's product comes in, sums reduced (on a mesh of any communicator: the same).
template <class Form, std::size_t D>
using result_layout = typename decltype(checks::final_value(
    multiply<Form>(std::declval<const dtensor<double, typename Form::left, process_mesh<threads::communicator, D>>&>(),
                   std::declval<const dtensor<double, typename Form::right, process_mesh<threads::communicator, D>>&>(),
                   matmul_options{})))::layout_type;

// Whether the operands' and the result's layouts all take their shapes on the grid (an exact output may
// refuse m rows its operands cut differently), and SUMMA's grid is square.
template <class Form, std::size_t D>
bool takes(std::int64_t m, std::int64_t k, std::int64_t n, const coordinates<D>& grid) {
  if (Form::square_grid && grid[0] != grid[D - 1]) return false;
  const matrix_extents left = Form::transpose_left ? matrix_extents{k, m} : matrix_extents{m, k};
  const matrix_extents right = Form::transpose_right ? matrix_extents{n, k} : matrix_extents{k, n};
  return accepts<typename Form::left>(left, grid) && accepts<typename Form::right>(right, grid) &&
         accepts<result_layout<Form, D>>({m, n}, grid);
}

template <std::size_t D>
void draw_on(generator& g, fuzz_case& c) {
  const std::vector<coordinates<D>> grids = grid_shapes<D>(c.ranks);
  const coordinates<D> grid = g.pick(grids);
  std::copy(grid.begin(), grid.end(), c.grid.begin());
  c.kind = static_cast<shape_kind>(g.between(0, static_cast<std::int64_t>(kind_names.size()) - 1));
  c.shape = draw_shape(g, c.kind, c.ranks);

  using layouts = typename catalogue<D>::layouts;
  std::vector<std::size_t> accepting;
  for (std::size_t l = 0; l < layouts::size; ++l)
    visit(layouts{}, l, [&]<class L>() {
      if (accepts<L>(c.shape, grid)) accepting.push_back(l);
    });
  c.refused_layouts = static_cast<int>(layouts::size - accepting.size());
  c.from = g.pick(accepting);  // replicated accepts every shape
  c.to = g.pick(accepting);
  c.scatter_root = static_cast<int>(g.between(0, c.ranks - 1));
  c.gather_root = static_cast<int>(g.between(0, c.ranks - 1));

  // Dimensions of the kind drawn, or divisible by P (which every exact cut takes), then a form that fits.
  using products = typename catalogue<D>::products;
  for (int attempt = 0; attempt < 2 && c.product < 0; ++attempt) {
    const shape_kind kind = attempt == 0 ? c.kind : shape_kind::divisible;
    c.m = extent(g, kind, c.ranks);
    c.k = extent(g, kind, c.ranks);
    c.n = extent(g, kind, c.ranks);
    std::vector<int> fitting;
    for (std::size_t p = 0; p < products::size; ++p)
      visit(products{}, p, [&]<class Form>() {
        if (takes<Form>(c.m, c.k, c.n, grid)) fitting.push_back(static_cast<int>(p));
      });
    if (!fitting.empty()) c.product = g.pick(fitting);
  }
  c.chunks = static_cast<int>(g.between(1, 3));

  std::string text = "case " + std::to_string(c.index) + ": " + std::to_string(c.ranks) + " ranks as the grid " +
                     shape_string(grid) + ", a " + std::to_string(c.shape.rows) + "x" + std::to_string(c.shape.cols) +
                     " matrix (" + kind_names[static_cast<std::size_t>(c.kind)] + "); ";
  const auto name = [&]<class L>() {
    text += type_name<L>();
    c.user_layout = c.user_layout || std::is_same_v<L, cyclic_rows>;
  };
  visit(layouts{}, c.from, name);
  text += " scattered from rank " + std::to_string(c.scatter_root) + ", gathered to rank " +
          std::to_string(c.gather_root) + ", redistributed to ";
  visit(layouts{}, c.to, name);
  if (c.product >= 0) {
    visit(products{}, static_cast<std::size_t>(c.product), [&]<class Form>() {
      text += "; the product " + type_name<typename Form::left>() + (Form::transpose_left ? "ᵀ" : "") + " · " +
              type_name<typename Form::right>() + (Form::transpose_right ? "ᵀ" : "");
    });
    text += ", m k n = " + std::to_string(c.m) + " " + std::to_string(c.k) + " " + std::to_string(c.n) + ", " +
            std::to_string(c.chunks) + " chunks";
  }
  c.description = text;
}

// ---- running a case

template <class Form, class Mesh>
void check_product(Mesh& mesh, const fuzz_case& c) {
  const matrix x = checks::serial(Form::transpose_left ? matrix_extents{c.k, c.m} : matrix_extents{c.m, c.k}, 1);
  const matrix y = checks::serial(Form::transpose_right ? matrix_extents{c.n, c.k} : matrix_extents{c.k, c.n}, 2);
  const auto left = checks::distributed<typename Form::left>(mesh, x);
  const auto right = checks::distributed<typename Form::right>(mesh, y);
  const auto product = multiply<Form>(left, right, {.chunks = c.chunks});
  const matrix expected = matrix(Form::transpose_left ? matrix(x.transpose()) : x) *
                          matrix(Form::transpose_right ? matrix(y.transpose()) : y);
  const auto result = checks::final_value(product);
  checks::expect_equals_serial(result, expected, 1e-12);
  if (mesh.world().rank() == 0) {
    EXPECT_NO_THROW(check_layout(left.mapping()));
    EXPECT_NO_THROW(check_layout(right.mapping()));
    EXPECT_NO_THROW(check_layout(result.mapping()));
  }
}

// Scatter from a random root, gather to another, redistribute to the second layout.
template <std::size_t D, class Mesh>
void run_layouts(Mesh& mesh, const fuzz_case& c) {
  auto& world = mesh.world();
  using layouts = typename catalogue<D>::layouts;
  const matrix whole = checks::serial(c.shape, 0);
  const bool checks_layouts = world.rank() == 0;
  visit(layouts{}, c.from, [&]<class A>() {
    const auto a = scatter<A>(mesh, world.rank() == c.scatter_root ? whole : matrix{}, c.scatter_root);
    checks::expect_equals_serial(a, whole, 0.0);
    const matrix back = gather(a, c.gather_root);
    if (world.rank() == c.gather_root) {
      EXPECT_TRUE(back == whole) << "gather to rank " << c.gather_root;
    } else {
      EXPECT_EQ(back.size(), 0);
    }
    if (checks_layouts) {
      EXPECT_NO_THROW(check_layout(a.mapping()));
    }
    visit(layouts{}, c.to, [&]<class B>() {
      const auto b = redistribute<B>(a);
      checks::expect_equals_serial(b, whole, 0.0);
      if (checks_layouts) {
        EXPECT_NO_THROW(check_layout(b.mapping()));
      }
    });
  });
}

// The product of the form drawn, if one fits.
template <std::size_t D, class Mesh>
void run_product(Mesh& mesh, const fuzz_case& c) {
  if (c.product >= 0)
    visit(typename catalogue<D>::products{}, static_cast<std::size_t>(c.product),
          [&]<class Form>() { check_product<Form>(mesh, c); });
}

// The meshes of this executable's backend.
template <std::size_t D>
using fuzz_mesh = process_mesh<backend::communicator_type, D>;

// Each mesh dimension's layouts, and its products (with the drawing, which deduces the products'
// layouts), compile in sources of their own: fuzz_layouts_<D>d.cpp, fuzz_products_<D>d.cpp.
extern template void run_layouts<1>(fuzz_mesh<1>&, const fuzz_case&);
extern template void run_layouts<2>(fuzz_mesh<2>&, const fuzz_case&);
extern template void run_layouts<3>(fuzz_mesh<3>&, const fuzz_case&);
extern template void run_product<1>(fuzz_mesh<1>&, const fuzz_case&);
extern template void run_product<2>(fuzz_mesh<2>&, const fuzz_case&);
extern template void run_product<3>(fuzz_mesh<3>&, const fuzz_case&);
extern template void draw_on<1>(generator&, fuzz_case&);
extern template void draw_on<2>(generator&, fuzz_case&);
extern template void draw_on<3>(generator&, fuzz_case&);

template <std::size_t D>
void run_case(backend::communicator_type& world, const fuzz_case& c) {
  coordinates<D> grid{};
  std::copy_n(c.grid.begin(), D, grid.begin());
  fuzz_mesh<D> mesh(world, grid);
  run_layouts<D>(mesh, c);
  run_product<D>(mesh, c);
}

}  // namespace shardwise::testing::fuzz
