#pragma once
// The weight update of data-parallel training, replicated or sharded across the N replicas
// (Xu et al., "Automatic Cross-Replica Sharding of Weight Update in Data-Parallel Training").
//
//   replicated_update<O>: all-reduce the gradients; every replica updates all weights and keeps all
//                         optimizer state.
//   sharded_update<O>:    reduce-scatter the gradients; replica r updates only block r of every bucket
//                         (flat_layout.hpp) and keeps only that block of the optimizer state, across
//                         steps; then all-gather the weights.
//
// Both are one class: the same segments, the same optimizer code, the same statistics. They differ in
// which segments a rank updates and in how per-shard partial sums become whole-tensor sums: sharded,
// one all-reduce per reduction round carries the sums of every tensor; replicated, the rank adds the
// partial sums of the N blocks itself, in rank order, which is the order in which the threads backend
// reduces, so there the two give bitwise equal weights for every optimizer.
//
// Gradients are averaged: the update sees (Σ over replicas of each replica's gradient) · (1/N), the
// product taken in float after the reduction (exactly the quotient when N is a power of two). With
// Weight = bf16 the weights the forward and backward passes read are bf16 (and gathered as bf16, half
// the bytes), while the update runs on float32 master weights kept like the optimizer state: sharded,
// or whole when replicated.
//
// Usage with a model (nn/, model/): the update takes the model's parameters, which from then on keep
// their weights and gradients in the update's flat buffers (one copy of the weights per rank), one
// tensor per parameter, this tensor-parallel rank's piece of it:
//   optim::sharded_update<optim::adamw> update(model, mesh.data(), optim::adamw{...});
//   loop: loss = model.forward(...); model.backward(...);                              // adds gradients
//         auto report = update.step(mesh.data(), mesh.tensor_parallel().world(), {lr, clip_norm});
//
// The gradients' reduction can overlap the backward pass, as PyTorch DDP's buckets do: with several
// buckets (update_options::bucket_elements), tell the update which gradients are final as the last
// backward pass before a step produces them, and each bucket's reduction starts as soon as all of its
// tensors are final, while the backward goes on through earlier layers:
//   model.backward(scale, [&](std::size_t first, std::size_t count) { update.gradients_ready(data, first, count); });
//
// Usage on plain tensors, on every rank:
//   optim::sharded_update<optim::adam> update(comm, {{7, 5}, {1, 13}}, optim::adam{}); // shapes, hyper-parameters
//   update.set_weights(0, initial_w0); update.set_weights(1, initial_w1);              // equal on every rank
//   loop: read update.weights(t); write this replica's gradients to update.gradients(t); update.step(comm, lr);
#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <numeric>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "shardwise/comm/communicator.hpp"
#include "shardwise/core/bf16.hpp"
#include "shardwise/core/element_memory.hpp"
#include "shardwise/core/error.hpp"
#include "shardwise/core/kernel.hpp"
#include "shardwise/core/shared_buffer.hpp"
#include "shardwise/core/work.hpp"
#include "shardwise/layout/layout.hpp"
#include "shardwise/optim/flat_layout.hpp"
#include "shardwise/optim/memory.hpp"
#include "shardwise/optim/model_parameters.hpp"
#include "shardwise/optim/optimizer.hpp"

namespace shardwise::optim {

enum class weight_update { replicated, sharded };

namespace detail {
struct checkpoint_access;  // checkpoint.hpp: reads and restores a replica's blocks
}  // namespace detail

struct update_options {
  // Elements per bucket (one reduce-scatter and one all-gather each per step); 0: all in one bucket.
  std::size_t bucket_elements = 0;
};

// One step of an update whose tensors are a tensor-parallel rank's pieces of a model's parameters.
struct step_options {
  float learning_rate = 0.0f;
  // Global-norm clipping: when the norm of all the averaged gradients exceeds clip_norm, they are
  // scaled by clip_norm / (norm + 1e-6) (as torch.nn.utils.clip_grad_norm_). 0: no clipping.
  float clip_norm = 0.0f;
};

struct step_report {
  double gradient_norm = 0.0;  // of the averaged gradients of the whole model, before clipping
};

template <class Optimizer, weight_update Mode, class Weight = float>
class data_parallel_update {
  static_assert(require_optimizer<Optimizer>());
  static_assert(std::is_same_v<Weight, float> || std::is_same_v<Weight, bf16>,
                "shardwise: weights are stored as float or bf16 (the update itself always runs in float32)");

  static constexpr bool sharded = Mode == weight_update::sharded;
  static constexpr bool has_master = !std::is_same_v<Weight, float>;
  static constexpr std::size_t K = state_count<Optimizer>;
  static constexpr int rounds = reduction_rounds<Optimizer>;
  static constexpr const char* name = sharded ? "sharded_update" : "replicated_update";

 public:
  using optimizer_type = Optimizer;
  using weight_type = Weight;

  template <communicator C>
  data_parallel_update(const C& comm, std::vector<parameter_shape> shapes, Optimizer hyper_parameters = {},
                       update_options options = {})
      : data_parallel_update(unallocated{}, comm, std::move(shapes), hyper_parameters, options) {
    allocate_weights();
    allocate_gradients();
    allocate_state();
  }

  // Hyper-parameters of one tensor, PyTorch's parameter groups (no weight decay on biases, say); every
  // tensor starts with the constructor's. The same on every replica.
  void set_optimizer(std::size_t tensor, const Optimizer& hyper_parameters) {
    checked(tensor, "set_optimizer");
    optimizers_[tensor] = hyper_parameters;
  }
  [[nodiscard]] const Optimizer& optimizer(std::size_t tensor) const {
    checked(tensor, "optimizer");
    return optimizers_[tensor];
  }

  // Whether this rank's copy of a tensor enters whole-tensor statistics summed over a tensor-parallel
  // group (step with step_options): false for copies that another rank of the group also holds, so each
  // element counts once. Every tensor counts until told otherwise.
  void set_counted(std::size_t tensor, bool counted) {
    checked(tensor, "set_counted");
    counted_[tensor] = counted ? 1 : 0;
  }

  // The memory of a tensor's weights and of its gradient in the update's flat buffers: a model's
  // parameters bind their storage to them (dtensor::bind), so the weights exist once on each rank and
  // backward writes its gradients where step() reads them.
  [[nodiscard]] shared_buffer<Weight> weight_storage(std::size_t tensor) const {
    checked(tensor, "weight_storage");
    return weights_.view(layout_.offset(tensor), layout_.shape(tensor).size());
  }
  [[nodiscard]] shared_buffer<float> gradient_storage(std::size_t tensor) const {
    checked(tensor, "gradient_storage");
    return gradients_.view(layout_.offset(tensor), layout_.shape(tensor).size());
  }

  // Zeros every gradient (padding included), for backward passes that add into them.
  void zero_gradients() { std::ranges::fill(gradients_.span(), 0.0f); }

  // An update of `model`'s parameters over the data-parallel replicas `comm`, one tensor per parameter
  // (this tensor-parallel rank's piece), in the model's order. The parameters' values and gradients are
  // bound to the update's buffers (dtensor::bind): their current values become the weights, and they
  // must be equal on every replica (models seed their initial weights, nn/parameter.hpp). Their
  // gradients must be zero, as a model's start: throws argument_error naming a parameter's otherwise.
  template <parameterised Model, communicator C>
  data_parallel_update(Model& model, const C& comm, Optimizer hyper_parameters = {}, update_options options = {})
      : data_parallel_update(detail::model_parameters<Weight>(model), comm, hyper_parameters, options) {}

  // The parameters of the model the update was built from (empty when built from shapes), tensor t
  // being parameter t.
  [[nodiscard]] std::span<const parameter_record> parameters() const noexcept { return records_; }
  // The tensor of the parameter called `name`; throws argument_error naming it when there is none.
  [[nodiscard]] std::size_t parameter_index(std::string_view parameter_name) const {
    for (std::size_t t = 0; t < records_.size(); ++t)
      if (records_[t].name == parameter_name) return t;
    throw argument_error(world_rank_, std::string(name) + "::parameter_index",
                         "the model has no parameter called \"" + std::string(parameter_name) + "\" (it has " +
                             std::to_string(records_.size()) + " parameters)");
  }

  [[nodiscard]] const flat_layout& layout() const noexcept { return layout_; }
  [[nodiscard]] const Optimizer& optimizer() const noexcept { return optimizer_; }
  [[nodiscard]] long steps_done() const noexcept { return steps_; }

  // The full weights of a tensor, equal on every replica between steps.
  [[nodiscard]] std::span<const Weight> weights(std::size_t tensor) const {
    checked(tensor, "weights");
    return std::span<const Weight>(weights_.span()).subspan(layout_.offset(tensor), layout_.shape(tensor).size());
  }

  // Sets a tensor's weights (and this replica's part of its master weights); the same on every replica.
  void set_weights(std::size_t tensor, std::span<const float> values) {
    checked(tensor, "set_weights");
    const std::size_t size = layout_.shape(tensor).size();
    if (values.size() != size)
      throw argument_error(world_rank_, std::string(name) + "::set_weights",
                           "tensor " + std::to_string(tensor) + " has " + std::to_string(size) + " elements, got " +
                               std::to_string(values.size()));
    if (!element_memory::stored_on_this_thread()) return;  // shapes only: no values to set
    std::copy(values.begin(), values.end(), weights_.data() + layout_.offset(tensor));
    if constexpr (has_master) {
      for (const auto& block : blocks_)
        for (const auto& run : block)
          if (run.tensor == tensor)
            std::copy_n(values.begin() + static_cast<std::ptrdiff_t>(run.first), run.count,
                        master_.data() + state_index(run));
    }
  }

  // Where this replica's gradient of a tensor goes before step(); step() consumes it (afterwards the
  // buffer holds partial reductions), so write every gradient before every step.
  [[nodiscard]] std::span<float> gradients(std::size_t tensor) {
    checked(tensor, "gradients");
    return gradients_.span().subspan(layout_.offset(tensor), layout_.shape(tensor).size());
  }

  // One update: reduce the gradients, update (this replica's part of) the weights, share the weights.
  // A collective: every replica calls it with the same learning rate.
  template <communicator C>
  void step(C& comm, float learning_rate) {
    run_step(comm, static_cast<C*>(nullptr), learning_rate);
  }

  // Tensors [first, first + count) have their final gradients for the coming step: starts the
  // reduction (the step's reduce-scatter, or all-reduce when replicated) of every bucket whose tensors
  // are now all final, on `comm`, the communicator the step will be given; step() waits for those and
  // reduces the other buckets itself. Collective like the step: every replica tells the same tensors in
  // the same order. The buckets' gradients must not change until the step.
  template <communicator C>
  void gradients_ready(C& comm, std::size_t first, std::size_t count) {
    check_communicator(comm, "gradients_ready");
    if (first > layout_.tensor_count() || count > layout_.tensor_count() - first)
      throw argument_error(world_rank_, std::string(name) + "::gradients_ready",
                           "tensors " + std::to_string(first) + " to " + std::to_string(first + count) +
                               " do not exist; there are " + std::to_string(layout_.tensor_count()));
    final_gradients_.resize(layout_.tensor_count());
    bucket_started_.resize(layout_.buckets().size());
    std::fill_n(final_gradients_.begin() + static_cast<std::ptrdiff_t>(first), count, 1);
    const auto buckets = layout_.buckets();
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      const auto tensors = std::span<const char>(final_gradients_)
                               .subspan(buckets[b].first_tensor, buckets[b].end_tensor - buckets[b].first_tensor);
      if (bucket_started_[b] || std::ranges::find(tensors, 0) != tensors.end()) continue;
      const auto bucket = gradients_.span().subspan(buckets[b].begin, buckets[b].padded);
      auto started =
          std::make_shared<typename C::request>(sharded ? comm.ireduce_scatter(bucket) : comm.iall_reduce(bucket));
      started_reductions_.emplace_back([started] { started->wait(); });
      bucket_started_[b] = 1;
    }
  }

  // Partial sharding: the replicas form groups, and the update shards within each group only. `group`
  // is this replica's group (the update was built on it); `across` joins the replicas that hold the
  // same block in every group. The gradients are reduce-scattered within the group, then the blocks are
  // all-reduced across groups (all buckets' blocks in one call) and averaged over the number of all
  // replicas, group.size() × across.size(); the weights are all-gathered within the group. The rate's
  // type is deduced, so a braced `{rate}` (which deduces nothing) never lands here: as a float
  // parameter, `step(data, tensor_parallel, {rate})` would have taken the tensor-parallel group for
  // `across` rather than build the step_options of the overload below.
  template <communicator C, communicator D, std::convertible_to<float> Rate>
  requires sharded void step(C& group, D& across, Rate learning_rate) {
    run_step(group, &across, static_cast<float>(learning_rate));
  }

  // Tensor parallelism beside data parallelism: this update's tensors are this rank's pieces of a
  // model's parameters, and `tensor_parallel` joins the ranks holding the other pieces (the same
  // tensors, in the same order, on each). The gradient norm, clipping and the optimizer's whole-tensor
  // statistics (LAMB's and LARS's norms) are then sums over the replicas' blocks and over the group,
  // each element counted once (set_counted). Returns the gradient norm, equal on every rank.
  // The gradients are zeroed afterwards, ready for the next backward passes to add into.
  template <communicator C, communicator T>
  step_report step(C& comm, T& tensor_parallel, const step_options& options) {
    if constexpr (whole_rows_statistics<Optimizer>)
      if (tensor_parallel.size() > 1)
        throw argument_error(world_rank_, std::string(name) + "::step",
                             "this optimizer's statistics need whole rows and columns of each parameter, which a "
                             "tensor-parallel group of " +
                                 std::to_string(tensor_parallel.size()) +
                                 " ranks cuts; use a tensor-parallel group of one rank, or adamw, lamb or lars");
    const step_report report =
        run_step(comm, static_cast<C*>(nullptr), options.learning_rate, &tensor_parallel, options.clip_norm);
    run_kernel(comm, {0, sizeof(float) * static_cast<double>(gradients_.span().size())}, "zero gradients",
               [&] { zero_gradients(); });
    return report;
  }

  // The whole of one state variable of one tensor (a collective when sharded: every replica calls it).
  template <communicator C>
  [[nodiscard]] std::vector<float> gather_state(C& comm, std::size_t state_variable, std::size_t tensor) const {
    check_communicator(comm, "gather_state");
    checked(tensor, "gather_state");
    if (state_variable >= K)
      throw argument_error(world_rank_, std::string(name) + "::gather_state",
                           "state variable " + std::to_string(state_variable) +
                               " does not exist; the optimizer keeps " + std::to_string(K));
    return gather_laid_out_like_state(
        comm, std::span<const float>(state_.span()).subspan(state_variable * state_length_, state_length_), tensor);
  }

  // The float32 weights of one tensor, whole: the master weights when the stored weights are narrower
  // (a collective when sharded), the weights themselves otherwise. What a checkpoint keeps.
  template <communicator C>
  [[nodiscard]] std::vector<float> gather_master_weights(C& comm, std::size_t tensor) const {
    check_communicator(comm, "gather_master_weights");
    checked(tensor, "gather_master_weights");
    if constexpr (has_master) {
      return gather_laid_out_like_state(comm, std::span<const float>(master_.span()), tensor);
    } else {
      const auto whole = weights(tensor);
      return {whole.begin(), whole.end()};
    }
  }

  // Sets this replica's part of a state variable of a tensor from the whole of it (the inverse of
  // gather_state; not a collective: each replica takes its own part). For checkpoints.
  void set_state(std::size_t state_variable, std::size_t tensor, std::span<const float> values) {
    checked(tensor, "set_state");
    const std::size_t size = layout_.shape(tensor).size();
    if (state_variable >= K || values.size() != size)
      throw argument_error(world_rank_, std::string(name) + "::set_state",
                           "state variable " + std::to_string(state_variable) + " of " + std::to_string(K) +
                               ", tensor " + std::to_string(tensor) + " of " + std::to_string(size) +
                               " elements: got " + std::to_string(values.size()));
    for (const auto& block : blocks_)
      for (const auto& run : block)
        if (run.tensor == tensor)
          std::copy_n(values.begin() + static_cast<std::ptrdiff_t>(run.first), run.count,
                      state_.data() + state_variable * state_length_ + state_index(run));
  }

  // The step count (Adam's bias correction reads it), for checkpoints.
  void set_steps_done(long steps) { steps_ = steps; }

  // The optimizer's per-tensor state (Adafactor's factors), equal on every replica.
  [[nodiscard]] std::span<const float> tensor_state(std::size_t tensor) const {
    checked(tensor, "tensor_state");
    return std::span<const float>(tensor_state_)
        .subspan(tensor_state_offsets_[tensor], tensor_state_offsets_[tensor + 1] - tensor_state_offsets_[tensor]);
  }

  // The bytes this replica holds, from the sizes of its own buffers.
  [[nodiscard]] memory_footprint memory() const noexcept {
    std::size_t statistics_bytes = partial_statistics_.size() * sizeof(double);
    for (const auto& sums : statistics_) statistics_bytes += sums.size() * sizeof(double);
    return {layout_.parameter_elements(),
            weights_.size() * sizeof(Weight),
            master_.size() * sizeof(float),
            (gradients_.size() + across_staging_.size()) * sizeof(float),
            state_.size() * sizeof(float),
            tensor_state_.size() * sizeof(float),
            statistics_bytes};
  }

 private:
  friend detail::checkpoint_access;

  struct unallocated {};

  static std::vector<parameter_shape> shapes_of(const std::vector<detail::model_parameter<Weight>>& parameters) {
    std::vector<parameter_shape> shapes;
    shapes.reserve(parameters.size());
    for (const auto& p : parameters) shapes.push_back(p.shape);
    return shapes;
  }

  // The model's constructor, on its parameters listed (optim/model_parameters.hpp), so that this code is
  // compiled once an optimizer and not once an optimizer and a model.
  template <communicator C>
  data_parallel_update(std::vector<detail::model_parameter<Weight>> parameters, const C& comm,
                       Optimizer hyper_parameters, update_options options)
      : data_parallel_update(unallocated{}, comm, shapes_of(parameters), hyper_parameters, options) {
    // Each flat buffer is allocated after the storage it replaces is given back: the gradients first
    // (zero, so nothing is copied), the weights once bound. The rank then never holds more than the
    // update keeps, as it would if the model had been built into the flat buffers.
    for (const auto& p : parameters)
      if (!p.gradient_is_zero)
        throw argument_error(world_rank_, std::string(name) + "(model, ...)",
                             "parameter \"" + p.record.name +
                                 "\" has a gradient that is not zero on this rank: build the update before the "
                                 "first backward pass, or zero the model's gradients first");
    for (const auto& p : parameters) p.release_gradient();
    try {
      allocate_weights();
      for (auto& p : parameters) {
        const std::size_t t = records_.size();
        records_.push_back(std::move(p.record));
        set_counted(t, records_.back().counted);
        p.bind_weights(weight_storage(t));
      }
      allocate_gradients();
      for (std::size_t t = 0; t < parameters.size(); ++t) parameters[t].bind_gradient(gradient_storage(t));
      allocate_state();
      if constexpr (has_master) load_master_weights();
    } catch (...) {
      // The model keeps working: gradients not yet bound get their zeros back.
      for (const auto& p : parameters) p.restore_gradient();
      throw;
    }
  }

  // Everything but the flat buffers, which the public constructors allocate in the order their
  // source of weights allows.
  template <communicator C>
  data_parallel_update(unallocated, const C& comm, std::vector<parameter_shape> shapes, Optimizer hyper_parameters,
                       update_options options)
      : layout_(std::move(shapes), comm.size(), options.bucket_elements),
        optimizer_(hyper_parameters),
        rank_(comm.rank()),
        world_rank_(comm.world_rank()),
        optimizers_(layout_.tensor_count(), hyper_parameters),
        counted_(layout_.tensor_count(), 1),
        state_length_(sharded ? layout_.shard_elements() : layout_.padded_elements()) {
    // Replicated, a rank updates every replica's block; sharded, only its own.
    for (int r = sharded ? rank_ : 0; r < (sharded ? rank_ + 1 : layout_.replicas()); ++r)
      blocks_.push_back(layout_.segments_of(r));

    std::size_t tensor_state = 0;
    for (std::size_t t = 0; t < layout_.tensor_count(); ++t) {
      tensor_state_offsets_.push_back(tensor_state);
      tensor_state += tensor_state_size(optimizer_, layout_.shape(t));
    }
    tensor_state_offsets_.push_back(tensor_state);
    tensor_state_.assign(tensor_state, 0.0f);

    if constexpr (rounds > 0) {
      for (int round = 0; round < rounds; ++round) {
        auto& offsets = statistics_offsets_[static_cast<std::size_t>(round)];
        std::size_t total = 0;
        for (std::size_t t = 0; t < layout_.tensor_count(); ++t) {
          offsets.push_back(total);
          total += optimizer_.statistics_size(round, layout_.shape(t));
        }
        offsets.push_back(total);
        statistics_[static_cast<std::size_t>(round)].assign(total, 0.0);
        if constexpr (!sharded) partial_statistics_.resize(std::max(partial_statistics_.size(), total));
      }
    }
  }

  // The weights and the master weights set_weights writes.
  void allocate_weights() {
    weights_ = shared_buffer<Weight>::zeros(layout_.padded_elements());
    if constexpr (has_master) master_ = shared_buffer<float>::zeros(state_length_);
  }
  void allocate_gradients() { gradients_ = shared_buffer<float>::zeros(layout_.padded_elements()); }
  void allocate_state() { state_ = shared_buffer<float>::zeros(K * state_length_); }

  void checked(std::size_t tensor, const char* operation) const {
    if (tensor >= layout_.tensor_count())
      throw argument_error(
          world_rank_, std::string(name) + "::" + operation,
          "tensor " + std::to_string(tensor) + " does not exist; there are " + std::to_string(layout_.tensor_count()));
  }

  template <class C>
  void check_communicator(const C& comm, const char* operation) const {
    if (comm.size() != layout_.replicas() || comm.rank() != rank_)
      throw argument_error(comm.world_rank(), std::string(name) + "::" + operation,
                           "built for rank " + std::to_string(rank_) + " of " + std::to_string(layout_.replicas()) +
                               " replicas, called with rank " + std::to_string(comm.rank()) + " of " +
                               std::to_string(comm.size()));
  }

  // The update of this rank's elements as one kernel (core/kernel.hpp): per element the gradient read,
  // the weight and the K states read and written (and the stored weight written, with master weights).
  // Priced by its memory traffic alone: every optimizer here does fewer operations per element than
  // that traffic leaves time for on any device modelled.
  [[nodiscard]] work update_work() const {
    double elements = 0;
    for (const auto& block : blocks_) elements += elements_of(block);
    const double per_element = sizeof(float) * (3 + 2 * static_cast<double>(K)) + (has_master ? sizeof(Weight) : 0);
    return {0, elements * per_element};
  }

  [[nodiscard]] static double elements_of(const std::vector<flat_layout::segment>& block) {
    double elements = 0;
    for (const auto& run : block) elements += static_cast<double>(run.count);
    return elements;
  }

  // Where a segment's state (and master weights) live: this replica's blocks when sharded, the flat
  // index when replicated.
  [[nodiscard]] std::size_t state_index(const flat_layout::segment& run) const noexcept {
    return sharded ? run.local : run.flat;
  }

  // `tensor_parallel` (may be null) joins the pieces of each tensor for whole-tensor sums.
  template <class C, class D, class T = C>
  step_report run_step(C& comm, D* across, float learning_rate, T* tensor_parallel = nullptr, float clip_norm = 0) try {
    check_communicator(comm, "step");
    const step_info step{++steps_, learning_rate};
    gradient_scale_ = 1.0f / reduce_gradients(comm, across);
    step_report report;
    if (tensor_parallel != nullptr) {
      report.gradient_norm = gradient_norm(comm, *tensor_parallel);
      if (clip_norm > 0 && report.gradient_norm > clip_norm)
        gradient_scale_ *= static_cast<float>(clip_norm / (report.gradient_norm + 1e-6));
    }
    if constexpr (rounds > 0) {
      for (int round = 0; round < rounds; ++round) {
        sum_statistics(comm, round, step, tensor_parallel);
        finish_statistics(comm, round, step);
      }
    }
    run_kernel(
        comm, [&] { return update_work(); }, "optimizer update",
        [&] {
          for (const auto& block : blocks_)
            for_each_slice(block, [&](const flat_layout::segment& run, const slice<K>& piece) {
              optimizers_[run.tensor].apply(step, piece, context_of(run.tensor));
              if constexpr (has_master) store_weights(run);
            });
        });
    if constexpr (sharded)
      for (const auto& b : layout_.buckets()) comm.all_gather(weights_.span().subspan(b.begin, b.padded));
    return report;
  } catch (...) {
    std::ostringstream rate;
    rate << learning_rate;
    rethrow_within_call(comm.world_rank(),
                        call_text(std::string(name) + "::step",
                                  "rank " + std::to_string(comm.rank()) + " of " + std::to_string(comm.size()),
                                  "learning rate " + rate.str()));
  }

  // The norm of all averaged gradients: per tensor, the sum of squares over this rank's blocks, added
  // over the replicas and over the tensor-parallel group as the optimizer's statistics are.
  template <class C, class T>
  [[nodiscard]] double gradient_norm(C& comm, T& tensor_parallel) {
    norm_sums_.resize(layout_.tensor_count());
    sum_over_blocks(comm, norm_sums_, [&](const std::vector<flat_layout::segment>& block, std::span<double> sums) {
      const double elements = elements_of(block);
      // Per element: averaged, squared, added; the gradient read once.
      run_kernel(comm, {3 * elements, sizeof(float) * elements}, "gradient norm", [&] {
        for_each_slice(block, [&](const flat_layout::segment& run, const slice<K>& piece) {
          double& sum = sums[run.tensor];
          for (const float g : piece.gradients) sum += static_cast<double>(g) * g;
        });
      });
    });
    std::vector<std::size_t> one_each(layout_.tensor_count() + 1);
    std::iota(one_each.begin(), one_each.end(), std::size_t{0});
    sum_over_tensor_parallel(tensor_parallel, norm_sums_, one_each);
    double total = 0.0;
    for (const double sum : norm_sums_) total += sum;
    return std::sqrt(total);
  }

  // Sums per-block partial results over this replica's blocks and the other replicas': sharded, one
  // all-reduce of this replica's block; replicated, the N blocks added here in rank order, the order in
  // which the threads backend reduces (so both give the same bits there).
  template <class C, class Accumulate>
  void sum_over_blocks(C& comm, std::span<double> sums, Accumulate&& accumulate_block) {
    if constexpr (sharded) {
      std::ranges::fill(sums, 0.0);
      accumulate_block(blocks_.front(), sums);
      comm.all_reduce(sums);
    } else {
      partial_statistics_.resize(std::max(partial_statistics_.size(), sums.size()));
      const auto partial = std::span<double>(partial_statistics_).first(sums.size());
      for (std::size_t r = 0; r < blocks_.size(); ++r) {
        const auto target = r == 0 ? sums : partial;
        std::ranges::fill(target, 0.0);
        accumulate_block(blocks_[r], target);
        if (r != 0)
          for (std::size_t i = 0; i < sums.size(); ++i) sums[i] += partial[i];
      }
    }
  }

  // Adds per-tensor sums (tensor t's at [offsets[t], offsets[t + 1])) over the tensor-parallel group,
  // leaving out the copies that are not counted.
  template <class T>
  void sum_over_tensor_parallel(T& tensor_parallel, std::span<double> sums, const std::vector<std::size_t>& offsets) {
    if (tensor_parallel.size() == 1) return;
    for (std::size_t t = 0; t < layout_.tensor_count(); ++t)
      if (counted_[t] == 0)
        std::fill(sums.begin() + static_cast<std::ptrdiff_t>(offsets[t]),
                  sums.begin() + static_cast<std::ptrdiff_t>(offsets[t + 1]), 0.0);
    tensor_parallel.all_reduce(sums);
  }

  // The gradient blocks this replica updates: its own block of each bucket, or all of every bucket.
  [[nodiscard]] std::span<float> reduced_gradients(const flat_layout::bucket& b) {
    const auto bucket = gradients_.span().subspan(b.begin, b.padded);
    return sharded ? bucket.subspan(static_cast<std::size_t>(rank_) * b.shard, b.shard) : bucket;
  }

  // Sums the gradients over the replicas (this replica's blocks, or all when replicated): waits for the
  // buckets gradients_ready started, in the order they started, then reduces the others. Returns how
  // many replicas they are summed over.
  template <class C, class D>
  [[nodiscard]] float reduce_gradients(C& comm, D* across) {
    for (const auto& wait : started_reductions_) wait();
    bucket_started_.resize(layout_.buckets().size());
    const auto buckets = layout_.buckets();
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      if (bucket_started_[b]) continue;
      const auto bucket = gradients_.span().subspan(buckets[b].begin, buckets[b].padded);
      if constexpr (sharded) comm.reduce_scatter(bucket);
      else
        comm.all_reduce(bucket);
    }
    started_reductions_.clear();
    bucket_started_.clear();
    final_gradients_.clear();
    int replicas = layout_.replicas();
    if (across != nullptr) {
      replicas *= across->size();
      sum_across_groups(*across);
    }
    return static_cast<float>(replicas);
  }

  // The optimizer sees a block's segments a few thousand elements at a time, with the summed
  // gradients averaged (and clipped) into a buffer that stays in L1 cache: averaging costs no pass of
  // its own over the gradients, and a product rather than a quotient (a division per element costs as
  // much as the rest of the averaging). visit(part, slice) gets each part as a segment.
  static constexpr std::size_t slice_elements = 4096;

  template <class Visit>
  void for_each_slice(const std::vector<flat_layout::segment>& block, Visit&& visit) {
    const float scale = gradient_scale_;
    std::array<float, slice_elements> averaged;
    for (const auto& run : block)
      for (std::size_t begin = 0; begin < run.count; begin += slice_elements) {
        const flat_layout::segment part{run.tensor, run.first + begin, std::min(slice_elements, run.count - begin),
                                        run.flat + begin, run.local + begin};
        auto piece = slice_of(part);
        std::ranges::transform(piece.gradients, averaged.begin(), [scale](float sum) { return sum * scale; });
        piece.gradients = std::span<const float>(averaged).first(part.count);
        visit(part, piece);
      }
  }

  // One all-reduce for the blocks of every bucket: in place with one bucket, else through a buffer
  // of one replica's blocks (allocated on first use, and counted by memory()).
  template <class D>
  void sum_across_groups(D& across) {
    const auto buckets = layout_.buckets();
    if (buckets.size() == 1) {
      across.all_reduce(reduced_gradients(buckets.front()));
      return;
    }
    if (across_staging_.size() == 0) across_staging_ = shared_buffer<float>::zeros(layout_.shard_elements());
    const auto staging = across_staging_.span();
    const auto elements = static_cast<std::int64_t>(staging.size());
    run_copy<float>(across, elements, "gradient staging", [&] {
      for (const auto& b : buckets)
        std::ranges::copy(reduced_gradients(b), staging.begin() + static_cast<std::ptrdiff_t>(b.shard_offset));
    });
    across.all_reduce(staging);
    run_copy<float>(across, elements, "gradient unstaging", [&] {
      for (const auto& b : buckets)
        std::ranges::copy(staging.subspan(b.shard_offset, b.shard), reduced_gradients(b).begin());
    });
  }

  // Whole-tensor sums of one round: each block's partial sums, added over the N blocks (and over the
  // tensor-parallel group, when there is one).
  template <class C, class T>
  void sum_statistics(C& comm, int round, const step_info& step, T* tensor_parallel) {
    auto& sums = statistics_[static_cast<std::size_t>(round)];
    const auto& offsets = statistics_offsets_[static_cast<std::size_t>(round)];
    sum_over_blocks(comm, sums, [&](const std::vector<flat_layout::segment>& block, std::span<double> partial) {
      const double elements = elements_of(block);
      // Per element: the weight, the gradient and the K states read; a few products added (the trust
      // ratio's norms), fewer than the traffic leaves time for, as in the update.
      run_kernel(comm, {0, sizeof(float) * (2 + static_cast<double>(K)) * elements}, "optimizer statistics", [&] {
        for_each_slice(block, [&](const flat_layout::segment& run, const slice<K>& piece) {
          optimizers_[run.tensor].accumulate(
              round, step, piece, tensor_state(run.tensor),
              partial.subspan(offsets[run.tensor], offsets[run.tensor + 1] - offsets[run.tensor]));
        });
      });
    });
    if (tensor_parallel != nullptr) sum_over_tensor_parallel(*tensor_parallel, sums, offsets);
  }

  // Every tensor's finish of `round`, from its complete statistics, as one kernel: each statistic read,
  // the tensor state read and written, an operation or two on each. An optimizer that keeps no tensor
  // state (LAMB, LARS) has nothing for its finish to write, so no kernel is launched for it.
  template <class C>
  void finish_statistics(C& comm, int round, const step_info& step) {
    const auto finish_all = [&] {
      for (std::size_t t = 0; t < layout_.tensor_count(); ++t)
        optimizers_[t].finish(round, step, layout_.shape(t), statistics(round, t), writable_tensor_state(t));
    };
    if (tensor_state_.empty()) {
      finish_all();
      return;
    }
    const auto state = static_cast<double>(tensor_state_.size());
    const auto sums = static_cast<double>(statistics_[static_cast<std::size_t>(round)].size());
    run_kernel(comm, {2 * state, sizeof(double) * sums + 2 * sizeof(float) * state}, "optimizer statistics finish",
               finish_all);
  }

  [[nodiscard]] std::span<const double> statistics(int round, std::size_t tensor) const {
    const auto& offsets = statistics_offsets_[static_cast<std::size_t>(round)];
    return std::span<const double>(statistics_[static_cast<std::size_t>(round)])
        .subspan(offsets[tensor], offsets[tensor + 1] - offsets[tensor]);
  }

  [[nodiscard]] std::span<float> writable_tensor_state(std::size_t tensor) {
    return std::span<float>(tensor_state_)
        .subspan(tensor_state_offsets_[tensor], tensor_state_offsets_[tensor + 1] - tensor_state_offsets_[tensor]);
  }

  [[nodiscard]] slice<K> slice_of(const flat_layout::segment& run) {
    slice<K> piece{run.tensor,
                   layout_.shape(run.tensor),
                   run.first,
                   master_weights(run),
                   std::span<const float>(gradients_.span()).subspan(run.flat, run.count),
                   {}};
    for (std::size_t k = 0; k < K; ++k)
      piece.state[k] = state_.span().subspan(k * state_length_ + state_index(run), run.count);
    return piece;
  }

  [[nodiscard]] std::span<float> master_weights(const flat_layout::segment& run) {
    if constexpr (has_master) return master_.span().subspan(state_index(run), run.count);
    else
      return weights_.span().subspan(run.flat, run.count);
  }

  // Tensor `tensor` of `values`, a buffer laid out like one state variable (this replica's shards when
  // sharded), whole.
  template <communicator C>
  [[nodiscard]] std::vector<float> gather_laid_out_like_state(C& comm, std::span<const float> values,
                                                              std::size_t tensor) const {
    const std::size_t begin = layout_.offset(tensor);
    const std::size_t size = layout_.shape(tensor).size();
    if constexpr (sharded) {
      const auto& b = layout_.bucket_of(tensor);
      std::vector<float> bucket(b.padded);
      comm.all_gather(values.subspan(b.shard_offset, b.shard), bucket);
      const auto first = bucket.begin() + static_cast<std::ptrdiff_t>(begin - b.begin);
      return {first, first + static_cast<std::ptrdiff_t>(size)};
    } else {
      const auto first = values.begin() + static_cast<std::ptrdiff_t>(begin);
      return {first, first + static_cast<std::ptrdiff_t>(size)};
    }
  }

  // This replica's master weights from the stored weights, widened (a model's bf16 values, bound).
  void load_master_weights() {
    if (!element_memory::stored_on_this_thread()) return;
    for (const auto& block : blocks_)
      for (const auto& run : block)
        std::copy_n(weights_.data() + run.flat, run.count, master_.data() + state_index(run));
  }

  // Rounds the updated master weights of a segment into the stored (narrower) weights.
  void store_weights(const flat_layout::segment& run) {
    const auto master = master_weights(run);
    std::ranges::copy(master, weights_.data() + run.flat);
  }

  [[nodiscard]] tensor_context context_of(std::size_t tensor) const {
    tensor_context context{layout_.shape(tensor), {}, tensor_state(tensor)};
    for (int round = 0; round < rounds; ++round)
      context.statistics[static_cast<std::size_t>(round)] = statistics(round, tensor);
    return context;
  }

  flat_layout layout_;
  Optimizer optimizer_;
  int rank_;
  int world_rank_;
  long steps_ = 0;
  std::vector<Optimizer> optimizers_;      // each tensor's hyper-parameters
  std::vector<char> counted_;              // whether each tensor enters tensor-parallel sums
  shared_buffer<Weight> weights_;          // full, padded
  shared_buffer<float> gradients_;         // full, padded
  float gradient_scale_ = 1.0f;            // this step's averaging (and clipping) factor
  std::vector<double> norm_sums_;          // per-tensor sums of squared gradients
  std::vector<parameter_record> records_;  // the model's parameters, when built from a model
  shared_buffer<float> master_;            // float32 weights when Weight is narrower, laid out like the state
  std::size_t state_length_ = 0;           // elements of one state variable on this replica
  shared_buffer<float> state_;             // K variables back to back
  std::vector<std::vector<flat_layout::segment>> blocks_;  // the segments this replica updates, block by block
  std::vector<std::size_t> tensor_state_offsets_;
  std::vector<float> tensor_state_;
  std::array<std::vector<std::size_t>, max_reduction_rounds> statistics_offsets_;
  std::array<std::vector<double>, max_reduction_rounds> statistics_;
  std::vector<double> partial_statistics_;  // replicated only: one block's partial sums
  shared_buffer<float> across_staging_;     // partial sharding with several buckets: blocks to all-reduce
  std::vector<char> final_gradients_;       // per tensor: told final by gradients_ready since the last step
  std::vector<char> bucket_started_;        // per bucket: its reduction started by gradients_ready
  std::vector<std::function<void()>> started_reductions_;  // a wait for each, in the order they started
};

template <class Optimizer, class Weight = float>
using sharded_update = data_parallel_update<Optimizer, weight_update::sharded, Weight>;

template <class Optimizer, class Weight = float>
using replicated_update = data_parallel_update<Optimizer, weight_update::replicated, Weight>;

}  // namespace shardwise::optim
