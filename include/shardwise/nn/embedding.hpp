#pragma once
// nn::embedding<T, Family, Mesh>: a language model's input, token embedding plus learned position
// embedding, forward and backward:
//   x.row(t) = token.row(tokens[t]) + position.row(t mod sequence)
// The token table (vocabulary x hidden) has its rows cut over the whole mesh (Family::vocabulary, as
// Megatron's VocabParallelEmbedding): each rank looks up the rows it owns, and a sum over the mesh
// completes them (ops/embedding_lookup.hpp) in the family's input layout (redistribute of a partial sum,
// tensor/distribute.hpp): an all-reduce in place where that is replicated, else a reduce-scatter into its
// blocks. The position table
// (context x hidden) is small and replicated: one rank adds it before the sum, and its gradient,
// computed from the gathered input gradient, is the same on every rank.
//
// Parameters: "token.weight" and "position.weight", uniform in ±0.02·√3 (standard deviation 0.02, as
// GPT-2) from the seed. The token table is also the tied output head's (nn/language_model_loss.hpp).
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "shardwise/core/error.hpp"
#include "shardwise/core/kernel.hpp"
#include "shardwise/core/work.hpp"
#include "shardwise/layout/partial_sum.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/nn/family.hpp"
#include "shardwise/nn/no_grad.hpp"
#include "shardwise/nn/parameter.hpp"
#include "shardwise/nn/saved_for_backward.hpp"
#include "shardwise/ops/embedding_lookup.hpp"
#include "shardwise/tensor/describe.hpp"
#include "shardwise/tensor/distribute.hpp"
#include "shardwise/tensor/dtensor.hpp"

namespace shardwise::nn {

template <class T, class Family, class Mesh>
class embedding {
  static_assert(tensor_parallel_family<Family, Mesh::dimensions>,
                "shardwise::nn::embedding: the family (nn/family.hpp) is for meshes of another number of dimensions");

 public:
  using table_type = parameter<T, typename Family::vocabulary, Mesh>;
  using position_table_type = parameter<T, replicated<>, Mesh>;
  using output_type = dtensor<T, typename Family::input, Mesh>;

  embedding(Mesh& mesh, std::int64_t vocabulary, std::int64_t context, std::int64_t hidden, std::uint64_t seed)
      : token_(mesh, {checked_vocabulary(mesh, vocabulary), hidden}, seed, initial_bound()),
        position_(mesh, {context, hidden}, seed + 1, initial_bound()) {}

  // `tokens`: samples of `sequence` ids each, back to back, the same on every rank of the mesh.
  [[nodiscard]] output_type forward(std::span<const std::int32_t> tokens, std::int64_t sequence) try {
    Mesh& mesh = token_.value.mesh();
    if (sequence < 1 || sequence > position_.value.rows() || tokens.size() % static_cast<std::size_t>(sequence) != 0)
      throw argument_error(mesh.world().world_rank(), "nn::embedding::forward",
                           std::to_string(tokens.size()) + " tokens do not form samples of " +
                               std::to_string(sequence) + " (at most the " + std::to_string(position_.value.rows()) +
                               " positions of the table)");
    if (no_grad::keeps_for_backward()) {
      kept_.emplace(kept_tokens{{tokens.begin(), tokens.end()}, sequence});
    } else {
      kept_.reset();
    }
    dtensor<T, partial_sum_over_all<replicated<>, Mesh::dimensions>, Mesh> x(
        mesh, {static_cast<std::int64_t>(tokens.size()), token_.value.cols()});
    auto addend = x.local();
    add_owned_rows(token_.value, tokens, addend);
    // One rank adds the positions: each element's sum then has two addends besides zeros, its token's
    // and its position's, which every order of the sum adds alike.
    if (mesh.world().rank() == 0) {
      const double elements = static_cast<double>(addend.size());
      run_kernel(mesh.world(), {elements, 3 * sizeof(T) * elements}, "position embedding", [&] {
        const auto positions = position_.value.local();
        for (Eigen::Index t = 0; t < addend.rows(); ++t) addend.row(t) += positions.row(t % sequence);
      });
    }
    return redistribute<typename Family::input>(std::move(x));
  } catch (...) {
    rethrow_within_call(world_rank_of(token_.value),
                        call_text("nn::embedding::forward", std::to_string(tokens.size()) + " tokens",
                                  "sequence " + std::to_string(sequence)));
  }

  // Adds the tables' gradients.
  void backward(const output_type& output_gradient) try {
    const kept_tokens kept = take_saved(kept_, world_rank_of(output_gradient), "nn::embedding::backward", "its tokens");
    const whole_matrix<T> gradient = all_gather(output_gradient);
    add_to_owned_rows(token_.gradient, kept.tokens, gradient);
    const double elements = static_cast<double>(gradient.size());
    run_kernel(output_gradient.mesh().world(), {elements, 3 * sizeof(T) * elements}, "position embedding backward",
               [&] {
                 auto positions = position_.gradient.local();
                 for (Eigen::Index t = 0; t < gradient.rows(); ++t)
                   positions.row(t % kept.sequence) += gradient.row(t).template cast<gradient_t<T>>();
               });
  } catch (...) {
    rethrow_within_call(world_rank_of(output_gradient),
                        call_text("nn::embedding::backward", describe(output_gradient)));
  }

  [[nodiscard]] table_type& token_table() noexcept { return token_; }

  template <class F>
  void for_each_parameter(F&& f, const std::string& prefix = "") {
    f(prefix + "token.weight", token_);
    f(prefix + "position.weight", position_);
  }

 private:
  static T initial_bound() { return static_cast<T>(0.02 * std::sqrt(3.0)); }

  static std::int64_t checked_vocabulary(Mesh& mesh, std::int64_t vocabulary) {
    if (vocabulary < mesh.world().size())
      throw argument_error(mesh.world().world_rank(), "nn::embedding",
                           "a vocabulary of " + std::to_string(vocabulary) + " is cut over the " +
                               std::to_string(mesh.world().size()) +
                               " ranks of the tensor-parallel group: it needs at least one entry per rank");
    return vocabulary;
  }

  struct kept_tokens {
    std::vector<std::int32_t> tokens;
    std::int64_t sequence;
  };

  table_type token_;
  position_table_type position_;
  std::optional<kept_tokens> kept_;  // the last forward's, for backward (nn/saved_for_backward.hpp)
};

}  // namespace shardwise::nn
