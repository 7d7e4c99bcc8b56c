#pragma once
// Scaled dot-product attention on distributed Q, K, V, forward and backward, with no communication.
//
// Q, K and V are (batch·sequence) x hidden matrices of one layout, hidden = heads·head_dim. For every
// sample s and head h, with Q_sh the sequence x head_dim block of sample s and head h:
//   S = Q_sh K_shᵀ / √head_dim (masked above the diagonal when causal),  P = softmax over each row of S,
//   O_sh = P V_sh.
// Attention mixes the rows of one sample and the columns of one head, nothing else, so it is local
// whenever every rank's block holds whole samples and whole heads — which is what the layouts of
// tensor-parallel Transformers give (docs/tensor-parallel.md):
//   1-D  Q, K, V column-parallel (row_1d): all rows, heads/P per rank          needs heads % P == 0
//   2-D  block_2d on q x q:           batch/q samples, heads/q per rank        needs batch % q == 0, heads % q == 0
//   3-D  cube_3d output (rows over (x, z), columns over y)                     needs batch % (p_x p_z) == 0,
//                                                                              heads % p_y == 0
// A block that cuts a sample or a head throws argument_error naming the rank, the block and the rule.
#include <Eigen/Core>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <range/v3/algorithm/find_if.hpp>
#include <string>

#include "shardwise/core/error.hpp"
#include "shardwise/core/kernel.hpp"
#include "shardwise/core/shared_buffer.hpp"
#include "shardwise/layout/blocks.hpp"
#include "shardwise/layout/partial_sum.hpp"
#include "shardwise/ops/gemm.hpp"
#include "shardwise/tensor/describe.hpp"
#include "shardwise/tensor/dtensor.hpp"

namespace shardwise {

struct attention_shape {
  std::int64_t sequence = 1;  // rows per sample
  std::int64_t head_dim = 1;  // columns per head
  bool causal = false;        // position t attends to positions <= t only
};

// Whether attention_forward keeps the probabilities P for attention_backward, a sequence x sequence
// matrix per (sample, head) tile, or keeps none and the backward computes them again from Q and K:
// the selective recomputation of Korthikanti et al. ("Reducing Activation Recomputation in Large
// Transformer Models", Megatron's --recompute-granularity selective), one more QKᵀ and softmax a tile
// in the backward for no activations that grow with the sequence's square. The bits are the same.
enum class attention_probabilities { kept, recomputed };

// What the backward pass needs from the forward one: how the forward ran and, when kept, every tile's
// probabilities in the order the tiles are visited. Activations a framework would save for the
// backward, so storage of the rank (core/shared_buffer.hpp): counted in its memory high-water mark,
// and given no memory in shapes-only runs.
template <class T>
struct attention_saved {
  attention_probabilities how = attention_probabilities::kept;
  shared_buffer<T> probabilities;
};

namespace detail {

template <class Tensor>
void check_attention_blocks(const Tensor& t, const attention_shape& shape, const char* operation) {
  static_assert(!Tensor::is_partial_sum,
                "shardwise::attention: Q, K and V hold partial sums; softmax of an addend is not softmax of the "
                "sum: call reduce(t) first");
  const int rank = t.mesh().world().world_rank();
  if (shape.sequence < 1 || shape.head_dim < 1)
    throw argument_error(rank, operation,
                         "sequence (" + std::to_string(shape.sequence) + ") and head_dim (" +
                             std::to_string(shape.head_dim) + ") must be positive");
  if (t.rows() % shape.sequence != 0 || t.cols() % shape.head_dim != 0)
    throw argument_error(rank, operation,
                         "a " + extents_string(t.rows(), t.cols()) + " matrix is not whole samples of " +
                             std::to_string(shape.sequence) + " rows and whole heads of " +
                             std::to_string(shape.head_dim) + " columns");
  // Every rank looks at every rank's blocks, so all refuse alike, naming the same first block that cuts.
  const auto whole_samples = [&](const block_info& b) {
    return b.row_offset % shape.sequence == 0 && b.rows % shape.sequence == 0;
  };
  const auto whole_heads = [&](const block_info& b) {
    return b.col_offset % shape.head_dim == 0 && b.cols % shape.head_dim == 0;
  };
  auto blocks = all_blocks(t.mapping());
  const auto first_cut =
      ranges::find_if(blocks, [&](const placed_block& p) { return !whole_samples(p.block) || !whole_heads(p.block); });
  if (first_cut == ranges::end(blocks)) return;
  const placed_block p = *first_cut;
  const block_info& info = p.block;
  throw argument_error(
      rank, operation,
      "rank " + std::to_string(p.rank) + "'s block of the tensor's group (" + owned_ranges(info) + ") cuts " +
          (whole_samples(info) ? "a head of " + std::to_string(shape.head_dim) + " columns"
                               : "a sample of " + std::to_string(shape.sequence) + " rows") +
          "; attention stays local only when every block holds whole samples and whole heads (batch divisible "
          "by the ranks the rows are split over, heads by the ranks the columns are split over)");
}

// Calls f(block, row, col) for every (sample, head) tile of every block, in a fixed order.
template <class Tensor, class F>
void for_each_tile(const Tensor& t, const attention_shape& shape, F&& f) {
  for (int b = 0; b < t.block_count(); ++b) {
    const block_info& info = t.block(b);
    for (std::int64_t r = 0; r < info.rows; r += shape.sequence)
      for (std::int64_t c = 0; c < info.cols; c += shape.head_dim) f(b, r, c);
  }
}

// One tile's work (a kernel, core/kernel.hpp): forward, S = QKᵀ and O = PV (2n²d operations each) and
// the softmax (12 per element of S, an exp counted as 8), reading Q, K, V and writing O, and P where
// it is kept; backward, four products of that size and 4 operations per element of P, reading Q, K, V,
// dO and the kept P, writing dQ, dK and dV, and where P is recomputed, the forward's S and softmax
// again in place of reading it.
template <class T>
[[nodiscard]] work attention_work(const attention_shape& shape, double tiles, bool backward,
                                  attention_probabilities how) {
  const auto n = static_cast<double>(shape.sequence);
  const auto d = static_cast<double>(shape.head_dim);
  const double element = sizeof(T);
  const bool recomputed = how != attention_probabilities::kept;
  const double kept_probabilities = recomputed ? 0 : n * n;
  const double products = tiles * (backward ? 8 + (recomputed ? 2 : 0) : 4) * n * n * d;
  const double softmax = tiles * (backward ? 4 + (recomputed ? 12 : 0) : 12) * n * n;
  const double bytes = tiles * element * ((backward ? 7 : 4) * n * d + kept_probabilities);
  return with_products_of<T>({products + softmax, bytes}, products);
}

// P = softmax(QKᵀ / √d) of one tile into p (n x n), masked above the diagonal when causal. The forward
// and a backward that recomputes P both call this, on memory aligned alike (tile_at), so P has the
// same bits both times.
template <class T, class Q, class K>
void tile_probabilities(strided_map<T> p, const Q& q_tile, const K& k_tile, const attention_shape& shape) {
  using A = accumulator_t<T>;  // the softmax's arithmetic: float for bf16 elements
  const A scale = A(1) / std::sqrt(static_cast<A>(shape.head_dim));
  const std::int64_t n = shape.sequence;
  gemm(destination(p), operand(q_tile), operand(k_tile).transposed());
  p = (p.template cast<A>() * scale).template cast<T>();
  for (std::int64_t i = 0; i < n; ++i) {
    // Masked positions get exactly 0, not exp(-inf): vectorised exp clamps its argument and returns a
    // denormal there, which would slow every product that reads P several times over.
    const std::int64_t seen = shape.causal ? i + 1 : n;
    auto row = p.row(i).head(seen);
    row = (row.template cast<A>().array() - A(row.maxCoeff())).exp().template cast<T>();
    row = (row.template cast<A>() / row.template cast<A>().sum()).template cast<T>();
    p.row(i).tail(n - seen).setZero();
  }
}

// Where tile `index`'s probabilities go: in the kept buffer, or in `scratch` (one tile and a vector
// more) at the offset from a 64-byte boundary the tile has in a kept buffer. Eigen's vectorised loops
// begin with scalar elements up to the first aligned address, so P's rounding depends on where the
// tile starts.
template <class T>
[[nodiscard]] T* tile_at(const attention_saved<T>& saved, const shared_buffer<T>& scratch, std::size_t index,
                         std::size_t tile_elements) {
  if (saved.how == attention_probabilities::kept) return saved.probabilities.data() + index * tile_elements;
  constexpr std::size_t per_vector = shared_buffer<T>::alignment / sizeof(T);
  return scratch.data() + (index * tile_elements) % per_vector;
}

template <class T>
[[nodiscard]] shared_buffer<T> probabilities_scratch(const attention_saved<T>& saved, std::size_t tile_elements) {
  if (saved.how == attention_probabilities::kept) return {};
  return shared_buffer<T>::scratch(tile_elements + shared_buffer<T>::alignment / sizeof(T));
}

template <class Tensor>
[[nodiscard]] std::size_t tile_count(const Tensor& t, const attention_shape& shape) {
  std::size_t tiles = 0;
  for_each_tile(t, shape, [&](int, std::int64_t, std::int64_t) { ++tiles; });
  return tiles;
}

}  // namespace detail

// O = attention(Q, K, V); fills `saved` for attention_backward, with the probabilities or, when `how` is
// recomputed, without them.
template <class T, class Layout, class Mesh>
[[nodiscard]] dtensor<T, Layout, Mesh> attention_forward(
    const dtensor<T, Layout, Mesh>& q, const dtensor<T, Layout, Mesh>& k, const dtensor<T, Layout, Mesh>& v,
    const attention_shape& shape, attention_saved<T>& saved,
    attention_probabilities how = attention_probabilities::kept) try {
  detail::check_attention_blocks(q, shape, "attention_forward");
  const std::int64_t n = shape.sequence;
  const std::int64_t d = shape.head_dim;
  dtensor<T, Layout, Mesh> out(q.mesh(), q.extents());
  // The last call's probabilities are given back before this call's are taken, sized before the kernel
  // (which a shapes-only run does not run).
  const std::size_t tiles = detail::tile_count(q, shape);
  const auto tile_elements = static_cast<std::size_t>(n * n);
  saved.how = how;
  saved.probabilities = shared_buffer<T>{};
  if (how == attention_probabilities::kept) saved.probabilities = shared_buffer<T>::zeros(tiles * tile_elements);
  const auto scratch = detail::probabilities_scratch(saved, tile_elements);
  run_kernel(q.mesh().world(), detail::attention_work<T>(shape, static_cast<double>(tiles), false, how), "attention",
             [&] {
               std::size_t tile = 0;
               detail::for_each_tile(q, shape, [&](int b, std::int64_t r, std::int64_t c) {
                 const detail::strided_map<T> p(detail::tile_at(saved, scratch, tile++, tile_elements), n, n,
                                                Eigen::OuterStride<>(n));
                 detail::tile_probabilities<T>(p, q.local(b).block(r, c, n, d), k.local(b).block(r, c, n, d), shape);
                 detail::gemm(detail::destination(out.local(b).block(r, c, n, d)), detail::operand(p),
                              detail::operand(v.local(b).block(r, c, n, d)));
               });
             });
  return out;
} catch (...) {
  rethrow_within_call(world_rank_of(q), call_text("attention_forward", describe(q), describe(k), describe(v)));
}

template <class T, class Layout, class Mesh>
struct attention_gradients {
  dtensor<T, Layout, Mesh> q;
  dtensor<T, Layout, Mesh> k;
  dtensor<T, Layout, Mesh> v;
};

// dQ, dK, dV from dO, with P kept by the forward pass or computed again here as it did:
//   dV = Pᵀ dO,  dP = dO Vᵀ,  dS = P ∘ (dP − rowsum(dP ∘ P)),  dQ = dS K / √d,  dK = dSᵀ Q / √d.
template <class T, class Layout, class Mesh>
[[nodiscard]] attention_gradients<T, Layout, Mesh> attention_backward(
    const dtensor<T, Layout, Mesh>& q, const dtensor<T, Layout, Mesh>& k, const dtensor<T, Layout, Mesh>& v,
    const dtensor<T, Layout, Mesh>& d_out, const attention_shape& shape, const attention_saved<T>& saved) try {
  detail::check_attention_blocks(q, shape, "attention_backward");
  using matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using A = accumulator_t<T>;
  const A scale = A(1) / std::sqrt(static_cast<A>(shape.head_dim));
  const std::int64_t n = shape.sequence;
  const std::int64_t d = shape.head_dim;
  const auto tile_elements = static_cast<std::size_t>(n * n);
  const std::size_t tiles = detail::tile_count(q, shape);
  if (saved.how == attention_probabilities::kept && saved.probabilities.size() != tiles * tile_elements)
    throw argument_error(q.mesh().world().world_rank(), "attention_backward",
                         "the saved forward state holds " + std::to_string(saved.probabilities.size()) +
                             " probabilities, these tensors need " + std::to_string(tiles) + " tiles of " +
                             extents_string(n, n) + ": pass the state of the same forward call");
  attention_gradients<T, Layout, Mesh> grad{{q.mesh(), q.extents()}, {q.mesh(), q.extents()}, {q.mesh(), q.extents()}};
  const auto scratch = detail::probabilities_scratch(saved, tile_elements);
  run_kernel(
      q.mesh().world(), detail::attention_work<T>(shape, static_cast<double>(tiles), true, saved.how),
      "attention backward", [&] {
        std::size_t tile = 0;
        detail::for_each_tile(q, shape, [&](int b, std::int64_t r, std::int64_t c) {
          const detail::strided_map<T> p(detail::tile_at(saved, scratch, tile++, tile_elements), n, n,
                                         Eigen::OuterStride<>(n));
          if (saved.how == attention_probabilities::recomputed)
            detail::tile_probabilities<T>(p, q.local(b).block(r, c, n, d), k.local(b).block(r, c, n, d), shape);
          const auto d_o = detail::operand(d_out.local(b).block(r, c, n, d));
          detail::gemm(detail::destination(grad.v.local(b).block(r, c, n, d)), detail::operand(p).transposed(), d_o);
          matrix d_p(n, n);
          detail::gemm(detail::destination(d_p), d_o, detail::operand(v.local(b).block(r, c, n, d)).transposed());
          const Eigen::Matrix<A, Eigen::Dynamic, 1> row_dot =
              (d_p.array() * p.array()).template cast<A>().rowwise().sum();
          const matrix d_s =
              ((p.template cast<A>().array() * (d_p.template cast<A>().array().colwise() - row_dot.array())).matrix() *
               scale)
                  .template cast<T>();
          detail::gemm(detail::destination(grad.q.local(b).block(r, c, n, d)), detail::operand(d_s),
                       detail::operand(k.local(b).block(r, c, n, d)));
          detail::gemm(detail::destination(grad.k.local(b).block(r, c, n, d)), detail::operand(d_s).transposed(),
                       detail::operand(q.local(b).block(r, c, n, d)));
        });
      });
  return grad;
} catch (...) {
  rethrow_within_call(world_rank_of(q),
                      call_text("attention_backward", describe(q), describe(k), describe(v), describe(d_out)));
}

}  // namespace shardwise
