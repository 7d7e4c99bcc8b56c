#pragma once
// nn::layer_norm<T, Layout, Mesh>: layer normalisation over rows with learnable gamma (starts at 1) and
// beta (starts at 0), both in vector_layout_t<Layout>; forward keeps what backward needs
// (ops/layer_norm.hpp does the work).
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "shardwise/core/error.hpp"
#include "shardwise/layout/vector_layout.hpp"
#include "shardwise/nn/no_grad.hpp"
#include "shardwise/nn/parameter.hpp"
#include "shardwise/nn/saved_for_backward.hpp"
#include "shardwise/ops/layer_norm.hpp"
#include "shardwise/tensor/describe.hpp"

namespace shardwise::nn {

template <class T, class Layout, class Mesh>
class layer_norm {
 public:
  using tensor_type = dtensor<T, Layout, Mesh>;
  using vector_type = parameter<T, vector_layout_t<Layout>, Mesh>;

  layer_norm(Mesh& mesh, std::int64_t features, T epsilon = T(1e-5))
      : gamma_(mesh, {1, features}, T(1)), beta_(mesh, {1, features}, T(0)), epsilon_(epsilon) {}

  [[nodiscard]] tensor_type forward(const tensor_type& x) try {
    auto [y, saved] = shardwise::layer_norm(x, gamma_.value, beta_.value, epsilon_);
    saved_.emplace(std::move(saved));
    release_under_no_grad(saved_);
    return std::move(y);
  } catch (...) {
    rethrow_within_call(world_rank_of(x), call_text("nn::layer_norm::forward", describe(x)));
  }

  [[nodiscard]] tensor_type backward(const tensor_type& output_gradient) try {
    const auto saved =
        take_saved(saved_, gamma_.value.mesh().world().world_rank(), "nn::layer_norm::backward", "its statistics");
    auto gradients = layer_norm_backward(output_gradient, saved, gamma_.value);
    gamma_.add_gradient(gradients.gamma);
    beta_.add_gradient(gradients.beta);
    return std::move(gradients.input);
  } catch (...) {
    rethrow_within_call(world_rank_of(output_gradient),
                        call_text("nn::layer_norm::backward", describe(output_gradient)));
  }

  // gamma is "weight" and beta "bias", as PyTorch names them.
  template <class F>
  void for_each_parameter(F&& f, const std::string& prefix = "") {
    f(prefix + "weight", gamma_);
    f(prefix + "bias", beta_);
  }

 private:
  vector_type gamma_;
  vector_type beta_;
  T epsilon_;
  std::optional<layer_norm_saved<T, Layout, Mesh>> saved_;
};

}  // namespace shardwise::nn
