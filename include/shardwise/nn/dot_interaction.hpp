#pragma once
// nn::dot_interaction<T, Layout, Mesh>: DLRM's pairwise dot-product interaction. For each sample, the
// bottom MLP's output x and the T pooled embeddings e_1 … e_T, all of width D, are the n = T + 1 rows
// of F = [x; e_1; …; e_T]; the output is x followed by the dot products F_i · F_j for i > j, in DLRM's
// order (1,0), (2,0), (2,1), (3,0), …: D + n(n − 1)/2 features.
//
// Backward, from the output's gradient (dx for x's copy, dZ_ij for each product):
//   dF_i += dZ_ij F_j and dF_j += dZ_ij F_i for every i > j, dx += the gradient of x's copy.
// Each sample is its own: the layout may cut the samples (rows) any way but must keep the features
// (columns) whole, and nothing travels.
#include <Eigen/Core>

#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "shardwise/core/error.hpp"
#include "shardwise/core/kernel.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/nn/no_grad.hpp"
#include "shardwise/nn/saved_for_backward.hpp"
#include "shardwise/ops/local_product.hpp"
#include "shardwise/tensor/describe.hpp"
#include "shardwise/tensor/dtensor.hpp"

namespace shardwise::nn {

template <class T, class Layout, class Mesh>
class dot_interaction {
  static_assert(split_layout<Layout> && Layout::col_axes.size() == 0,
                "shardwise::nn::dot_interaction: each sample's features must be whole on a rank, so the layout may cut "
                "the rows only (replicated<>, col_1d<>, …)");

 public:
  using tensor_type = dtensor<T, Layout, Mesh>;

  struct gradients {
    tensor_type dense;
    tensor_type embeddings;
  };

  // Features out of `tables` embeddings and the dense vector, each of width `dimension`.
  [[nodiscard]] static std::int64_t output_width(std::int64_t tables, std::int64_t dimension) {
    const std::int64_t n = tables + 1;
    return dimension + n * (n - 1) / 2;
  }

  // dense {samples, D}, embeddings {samples, T·D} → {samples, D + (T+1)T/2}. Keeps both for backward:
  // a copy of each, or the tensor itself when given a temporary.
  template <class Dense, class Embeddings>
  requires std::same_as<std::remove_cvref_t<Dense>, tensor_type> &&
           std::same_as<std::remove_cvref_t<Embeddings>, tensor_type>
  [[nodiscard]] tensor_type forward(Dense&& dense, Embeddings&& embeddings) try {
    const std::int64_t D = dense.cols();
    if (embeddings.rows() != dense.rows() || D < 1 || embeddings.cols() % D != 0)
      throw argument_error(world_rank_of(dense), "nn::dot_interaction::forward",
                           "the embeddings must be whole rows of the dense vector's width " + std::to_string(D) +
                               " for the same samples; got " + extents_string(embeddings.extents()) + " beside " +
                               extents_string(dense.rows(), D));
    const std::int64_t tables = embeddings.cols() / D;
    tensor_type out(dense.mesh(), {dense.rows(), output_width(tables, D)});
    for (int b = 0; b < out.block_count(); ++b) {
      const auto x = dense.local(b);
      const auto e = embeddings.local(b);
      auto y = out.local(b);
      run(dense, {2.0 * static_cast<double>(y.rows() * (y.cols() - D) * D), element_bytes(x, e, y)}, [&] {
        y.leftCols(D) = x;
        for (Eigen::Index s = 0; s < y.rows(); ++s) {
          Eigen::Index at = D;
          for (std::int64_t i = 1; i <= tables; ++i)
            for (std::int64_t j = 0; j < i; ++j) y(s, at++) = feature(x, e, s, i, D).dot(feature(x, e, s, j, D));
        }
      });
    }
    if (no_grad::keeps_for_backward()) {
      dense_.emplace(std::forward<Dense>(dense));
      embeddings_.emplace(std::forward<Embeddings>(embeddings));
    } else {  // no copies to make: the last forward's are given back
      dense_.reset();
      embeddings_.reset();
    }
    return out;
  } catch (...) {
    rethrow_within_call(world_rank_of(dense),
                        call_text("nn::dot_interaction::forward", describe(dense), describe(embeddings)));
  }

  [[nodiscard]] gradients backward(const tensor_type& output_gradient) try {
    const int rank = world_rank_of(output_gradient);
    constexpr std::string_view call = "nn::dot_interaction::backward";
    const auto dense = take_saved(dense_, rank, call, "its dense input");
    const auto embeddings = take_saved(embeddings_, rank, call, "its embeddings");
    const std::int64_t D = dense.cols(), tables = embeddings.cols() / D;
    gradients g{tensor_type(dense.mesh(), dense.extents()), tensor_type(embeddings.mesh(), embeddings.extents())};
    for (int b = 0; b < output_gradient.block_count(); ++b) {
      const auto x = dense.local(b);
      const auto e = embeddings.local(b);
      const auto dy = output_gradient.local(b);
      auto dx = g.dense.local(b);
      auto de = g.embeddings.local(b);
      run(output_gradient, {4.0 * static_cast<double>(dy.rows() * (dy.cols() - D) * D), element_bytes(x, e, dy)}, [&] {
        dx = dy.leftCols(D);
        de.setZero();
        for (Eigen::Index s = 0; s < dy.rows(); ++s) {
          Eigen::Index at = D;
          for (std::int64_t i = 1; i <= tables; ++i)
            for (std::int64_t j = 0; j < i; ++j, ++at) {
              const T z = dy(s, at);
              feature(dx, de, s, i, D) += z * feature(x, e, s, j, D);
              feature(dx, de, s, j, D) += z * feature(x, e, s, i, D);
            }
        }
      });
    }
    return g;
  } catch (...) {
    rethrow_within_call(world_rank_of(output_gradient),
                        call_text("nn::dot_interaction::backward", describe(output_gradient)));
  }

 private:
  // Row s of F_i: the dense vector for i = 0, else embedding i − 1.
  template <class Dense, class Embeddings>
  static auto feature(Dense&& x, Embeddings&& e, Eigen::Index s, std::int64_t i, std::int64_t D) {
    return i == 0 ? x.row(s).segment(0, D) : e.row(s).segment((i - 1) * D, D);
  }
  template <class... Blocks>
  static double element_bytes(const Blocks&... blocks) {
    return static_cast<double>(sizeof(T)) * static_cast<double>((blocks.size() + ...));
  }
  // Runs `compute` as a kernel doing `work` where the mesh's ranks drive modelled devices.
  template <class Compute>
  static void run(const tensor_type& on, const shardwise::work& work, Compute&& compute) {
    run_kernel(on.mesh().world(), work, "dot interaction", compute);
  }

  std::optional<tensor_type> dense_, embeddings_;
};

}  // namespace shardwise::nn
