#pragma once
// nn::relu_mlp<T, Layout, Mesh>: DLRM's multilayer perceptrons, linear layers of widths[0] → widths[1] →
// … → widths.back(), each followed by a ReLU except the last, which has one only when `relu_last`
// (DLRM's bottom MLP ends in a ReLU, its top MLP in the logit).
//
// Data parallel: the activations' rows are samples, whole or cut over the mesh's axis 0 (col_1d), and
// the weights are replicated, so every product is local (ops/matmul_1d.hpp) and a weight's gradient is
// the sum over this rank's samples, all-reduced over the mesh's axis 0 (nothing to reduce on a mesh of
// one rank, as when the mesh is a data_parallel_mesh's tensor_parallel(): the replicas' sum is then the
// update's, optim/sharded.hpp).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "shardwise/core/error.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/nn/linear.hpp"
#include "shardwise/nn/no_grad.hpp"
#include "shardwise/nn/saved_for_backward.hpp"
#include "shardwise/tensor/binary_transform.hpp"
#include "shardwise/tensor/describe.hpp"
#include "shardwise/tensor/elementwise.hpp"

namespace shardwise::nn {

template <class T, class Layout, class Mesh>
class relu_mlp {
  using layer_type = linear<T, Layout, replicated<>, Mesh>;
  static_assert(std::is_same_v<typename layer_type::output_layout, Layout>,
                "shardwise::nn::relu_mlp: the activations' layout must keep the features whole and may cut the samples "
                "over axis 0 only (replicated<> or col_1d<>), so that each layer's output has its input's layout");

 public:
  using tensor_type = dtensor<T, Layout, Mesh>;

  // widths: the input's features, then each layer's outputs; `seed` names the stack, layer l takes
  // seed + l.
  relu_mlp(Mesh& mesh, const std::vector<std::int64_t>& widths, bool relu_last, std::uint64_t seed)
      : relu_last_(relu_last) {
    if (widths.size() < 2)
      throw argument_error(
          mesh.world().world_rank(), "nn::relu_mlp",
          "needs an input width and at least one layer's; got " + std::to_string(widths.size()) + " widths");
    layers_.reserve(widths.size() - 1);
    for (std::size_t l = 0; l + 1 < widths.size(); ++l) layers_.emplace_back(mesh, widths[l], widths[l + 1], seed + l);
    outputs_.resize(layers_.size());
  }

  // Each layer keeps its input for backward: the first a copy of x, or x itself when given a temporary
  // (as nn::linear).
  [[nodiscard]] tensor_type forward(const tensor_type& x) { return forward_from(x); }
  [[nodiscard]] tensor_type forward(tensor_type&& x) { return forward_from(std::move(x)); }

  [[nodiscard]] tensor_type backward(const tensor_type& output_gradient) try {
    std::optional<tensor_type> gradient;
    for (std::size_t l = layers_.size(); l-- > 0;) {
      const tensor_type& dy = gradient ? *gradient : output_gradient;
      if (activated(l)) {
        const tensor_type output =
            take_saved(outputs_[l], world_rank_of(output_gradient), "nn::relu_mlp::backward", "its layers' outputs");
        gradient.emplace(layers_[l].backward(transform(dy, output, [](T g, T pre) { return pre > T(0) ? g : T(0); })));
      } else {
        gradient.emplace(layers_[l].backward(dy));
      }
    }
    return std::move(*gradient);
  } catch (...) {
    rethrow_within_call(world_rank_of(output_gradient), call_text("nn::relu_mlp::backward", describe(output_gradient)));
  }

  template <class F>
  void for_each_parameter(F&& f, const std::string& prefix = "") {
    for (std::size_t l = 0; l < layers_.size(); ++l) layers_[l].for_each_parameter(f, prefix + std::to_string(l) + ".");
  }

 private:
  [[nodiscard]] bool activated(std::size_t l) const { return l + 1 < layers_.size() || relu_last_; }

  // A layer followed by a ReLU keeps its output for the ReLU's backward; the last layer without one
  // hands its output on.
  template <class Input>
  [[nodiscard]] tensor_type forward_from(Input&& x) try {
    std::optional<tensor_type> y;
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      tensor_type output = y ? layers_[l].forward(std::move(*y)) : layers_[l].forward(std::forward<Input>(x));
      if (!activated(l)) {
        y.emplace(std::move(output));
        continue;
      }
      y.emplace(transform(output, [](T v) { return v > T(0) ? v : T(0); }));
      outputs_[l].emplace(std::move(output));
      release_under_no_grad(outputs_[l]);
    }
    return std::move(*y);
  } catch (...) {
    rethrow_within_call(world_rank_of(x), call_text("nn::relu_mlp::forward", describe(x)));
  }

  std::vector<layer_type> layers_;
  std::vector<std::optional<tensor_type>> outputs_;  // each ReLU's input, for backward
  bool relu_last_;
};

}  // namespace shardwise::nn
