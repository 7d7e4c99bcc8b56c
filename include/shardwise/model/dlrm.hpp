#pragma once
// model::dlrm<T, Comm>: a deep learning recommendation model (Naumov et al.), trained with its
// embedding tables model-parallel and everything else data-parallel:
//
//   x      = bottom MLP(dense features)                   ReLU after every layer; width D
//   e      = embedding bags(sparse features)              tables over the ranks (fused/embedding_bag.hpp)
//   z      = [x, F_i · F_j for i > j],  F = [x; e_1; …; e_T]   (nn/dot_interaction.hpp)
//   logit  = top MLP(z)                                   ReLU after every layer but the last, of width 1
//   loss   = binary cross-entropy(logit, click), the mean over the global batch
//
// on a data_parallel_mesh(world, P, {1}): each rank is a data replica with its own samples (the plan's
// cut of the global batch, fused/embedding_plan.hpp), its dense layers on mesh.tensor_parallel() (one
// rank), and the tables spread over mesh.data(). Dense parameters are updated with sharded_update over
// mesh.data() (optim/sharded.hpp), the tables with a sparse optimizer on the rows each batch touched
// (optim/sparse_update.hpp).
//
// Gradients: backward gives the tables the gradient of the global batch's mean loss, and the dense
// parameters P times this rank's share of it, because the update averages the replicas' gradients:
// the average is then the mean loss's gradient, for any cut of the batch.
//
//   model::dlrm<float, threads::communicator> model(mesh, config, global_batch);
//   double loss = model.forward(batch);   // batch: data::dlrm_generator's, this rank's part
//   model.backward();
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "shardwise/core/error.hpp"
#include "shardwise/core/kernel.hpp"
#include "shardwise/fused/embedding_bag.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/mesh/data_parallel_mesh.hpp"
#include "shardwise/model/dlrm_batch.hpp"
#include "shardwise/nn/binary_cross_entropy.hpp"
#include "shardwise/nn/dot_interaction.hpp"
#include "shardwise/nn/relu_mlp.hpp"
#include "shardwise/tensor/elementwise.hpp"

namespace shardwise::model {

struct dlrm_config {
  std::int64_t dense_features = 13;
  std::vector<std::int64_t> bottom = {64, 16};  // the bottom MLP's widths; the last is every table's width
  std::vector<std::int64_t> top = {64, 1};      // the top MLP's widths after the interaction; the last is 1
  std::vector<fused::embedding_table> tables;   // their dimension: 0 or bottom.back()
  fused::pooling pooling = fused::pooling::sum;
  std::uint64_t seed = 1;
};

// Seconds a rank spent in the embedding layer in the last forward and backward.
struct embedding_seconds {
  double forward = 0;
  double backward = 0;
};

template <class T, class Comm>
class dlrm {
 public:
  using mesh_type = data_parallel_mesh<Comm, 1>;
  using local_mesh_type = typename mesh_type::tensor_parallel_mesh_type;
  using tensor_type = dtensor<T, col_1d<>, local_mesh_type>;
  using embedding_type = fused::embedding_bag<T, Comm, local_mesh_type>;

  // Collective over the mesh: every rank passes the same config, batch and options.
  dlrm(mesh_type& mesh, dlrm_config config, std::int64_t global_batch, fused::embedding_options options = {})
      : mesh_(&mesh),
        config_(checked(mesh, std::move(config))),
        bottom_(mesh.tensor_parallel(), widths(config_.dense_features, config_.bottom), true, config_.seed * 1000),
        embedding_(mesh.data(), mesh.tensor_parallel(), config_.tables, global_batch, config_.seed * 1000 + 100,
                   with_pooling(std::move(options), config_.pooling)),
        top_(mesh.tensor_parallel(),
             widths(nn::dot_interaction<T, col_1d<>, local_mesh_type>::output_width(
                        static_cast<std::int64_t>(config_.tables.size()), config_.bottom.back()),
                    config_.top),
             false, config_.seed * 1000 + 200) {}

  [[nodiscard]] const dlrm_config& config() const noexcept { return config_; }
  [[nodiscard]] embedding_type& embedding() noexcept { return embedding_; }
  // This rank's samples and the tables whose bags it reads (data::dlrm_generator::batch takes these).
  [[nodiscard]] std::int64_t first_row() const { return embedding_.first_row(); }
  [[nodiscard]] std::int64_t rows() const { return embedding_.rows(); }
  [[nodiscard]] std::int64_t global_batch() const { return embedding_.global_batch(); }
  [[nodiscard]] std::span<const int> input_tables() const noexcept { return embedding_.input_tables(); }

  // The mean loss over the global batch (equal on every rank); keeps what backward needs, and the batch
  // must outlive backward (the embedding reads its bags again).
  [[nodiscard]] double forward(const dlrm_batch<T>& batch) try {
    if (batch.rows != rows() || batch.first_row != first_row() || batch.sparse.size() != input_tables().size())
      throw argument_error(mesh_->data().world_rank(), "model::dlrm::forward",
                           "the batch holds samples from " + std::to_string(batch.first_row) + " (" +
                               std::to_string(batch.rows) + " of them) and " + std::to_string(batch.sparse.size()) +
                               " tables' bags; this rank's are from " + std::to_string(first_row()) + " (" +
                               std::to_string(rows()) + ") and " + std::to_string(input_tables().size()) + " tables");
    tensor_type dense(mesh_->tensor_parallel(), {rows(), config_.dense_features});
    run_copy<T>(mesh_->tensor_parallel().world(), static_cast<std::int64_t>(batch.dense.size()), "dense features",
                [&] { std::ranges::copy(batch.dense, dense.data().begin()); });
    auto x = bottom_.forward(std::move(dense));
    bags_.clear();
    for (const auto& b : batch.sparse) bags_.push_back({b.offsets, b.indices});
    const auto start = std::chrono::steady_clock::now();
    auto e = embedding_.forward(bags_);
    seconds_.forward = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const auto logits = top_.forward(interaction_.forward(std::move(x), std::move(e)));
    double loss = loss_.forward(logits, batch.labels);
    mesh_->data().all_reduce(std::span<double>(&loss, 1));
    return loss / static_cast<double>(global_batch());
  } catch (...) {
    rethrow_within_call(mesh_->data().world_rank(),
                        call_text("model::dlrm::forward", std::to_string(batch.rows) + " samples"));
  }

  // Adds the gradients of forward's loss: the tables' own, the dense parameters' times the replicas.
  void backward() try {
    const auto replicas = static_cast<T>(mesh_->data().size());
    const auto dz = top_.backward(loss_.backward(replicas / static_cast<T>(global_batch())));
    auto [dx, de] = interaction_.backward(dz);
    (void)bottom_.backward(dx);
    scale(de, T(1) / replicas);
    const auto start = std::chrono::steady_clock::now();
    embedding_.backward(de);
    seconds_.backward = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  } catch (...) {
    rethrow_within_call(mesh_->data().world_rank(), call_text("model::dlrm::backward"));
  }

  // The click probability of each of this rank's samples in the last forward.
  [[nodiscard]] std::span<const T> probabilities() const noexcept { return loss_.probabilities(); }
  [[nodiscard]] const embedding_seconds& seconds_in_embedding() const noexcept { return seconds_; }

  // The dense parameters ("bottom.<l>.weight", "top.<l>.bias", …), for sharded_update.
  template <class F>
  void for_each_parameter(F&& f, const std::string& prefix = "") {
    bottom_.for_each_parameter(f, prefix + "bottom.");
    top_.for_each_parameter(f, prefix + "top.");
  }
  // The table pieces this rank holds ("embedding.tables.<t>", …), for sparse_update.
  template <class F>
  void for_each_sparse_parameter(F&& f, const std::string& prefix = "") {
    embedding_.for_each_sparse_parameter(f, prefix + "embedding.");
  }

 private:
  static dlrm_config checked(mesh_type& mesh, dlrm_config c) {
    const auto fail = [&](const std::string& what) {
      throw argument_error(mesh.data().world_rank(), "model::dlrm", what);
    };
    if (const int size = mesh.tensor_parallel().world().size(); size != 1)
      fail(
          "the tensor-parallel grid must be {1}: the dense layers are data-parallel, the tables model-parallel; "
          "it has " +
          std::to_string(size) + " ranks");
    if (c.dense_features < 1) fail("needs dense features; got " + std::to_string(c.dense_features));
    if (c.bottom.empty() || c.top.empty()) fail("needs a bottom MLP and a top MLP; one has no layers");
    if (c.top.back() != 1)
      fail("the top MLP must end in one logit; its last layer has " + std::to_string(c.top.back()) + " outputs");
    if (c.tables.empty()) fail("needs at least one table");
    for (auto& t : c.tables) {
      if (t.dimension == 0) t.dimension = static_cast<int>(c.bottom.back());
      if (t.dimension != c.bottom.back())
        fail("every table's width must be the bottom MLP's output width " + std::to_string(c.bottom.back()) +
             " (the interaction takes dot products); got " + std::to_string(t.dimension));
    }
    return c;
  }
  static std::vector<std::int64_t> widths(std::int64_t input, const std::vector<std::int64_t>& layers) {
    std::vector<std::int64_t> all{input};
    all.insert(all.end(), layers.begin(), layers.end());
    return all;
  }
  static fused::embedding_options with_pooling(fused::embedding_options options, fused::pooling how) {
    options.pooling = how;
    return options;
  }

  mesh_type* mesh_;
  dlrm_config config_;
  nn::relu_mlp<T, col_1d<>, local_mesh_type> bottom_;
  embedding_type embedding_;
  nn::dot_interaction<T, col_1d<>, local_mesh_type> interaction_;
  nn::relu_mlp<T, col_1d<>, local_mesh_type> top_;
  nn::binary_cross_entropy<T, col_1d<>, local_mesh_type> loss_;
  std::vector<fused::embedding_bags> bags_;
  embedding_seconds seconds_;
};

}  // namespace shardwise::model
