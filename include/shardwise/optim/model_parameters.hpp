#pragma once
// A model's parameters as an update takes them (optim/sharded.hpp), whatever their layers' types: a
// model lists them with for_each_parameter(f), calling f(name, p) for each nn::parameter p, and
// model_parameters walks that list once, keeping of each parameter what the update reads (its name,
// shape and this rank's blocks) and what the update does to it (bind its weights and gradient to the
// update's flat buffers). The update's code then depends on the optimizer and not on the model, and the
// model's walk on the model and not on the optimizer: a program that offers several optimizers for
// several models compiles the walk once a model, not once a pair.
#include <algorithm>
#include <cstddef>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "shardwise/core/element_memory.hpp"
#include "shardwise/core/shared_buffer.hpp"
#include "shardwise/layout/layout.hpp"
#include "shardwise/optim/flat_layout.hpp"

namespace shardwise::optim {

// One parameter of a model as the update knows it: its name, global shape, this rank's blocks of it
// and whether this rank's copy is the one counted in tensor-parallel sums.
struct parameter_record {
  std::string name;
  matrix_extents extents;
  std::vector<block_info> blocks;
  bool counted = true;
};

// A model (or layer) whose parameters an update can take: for_each_parameter(f) calls f(name, p) for
// each nn::parameter p.
template <class M>
concept parameterised = requires(M& model) { model.for_each_parameter([](const std::string&, auto&) {}); };

namespace detail {

// This rank's storage of a parameter as one of the update's tensors: one block as its stored matrix,
// several (or none) as a row of all their elements.
template <class Tensor>
[[nodiscard]] parameter_shape local_shape(const Tensor& value) {
  if (value.block_count() == 1) {
    const block_info& b = value.block(0);
    return {static_cast<std::size_t>(b.stored_rows), static_cast<std::size_t>(b.stored_cols)};
  }
  return {1, value.data().size()};
}

// Whether this rank holds the copy of each of its blocks that owner() names (the lowest rank among the
// copies), so that summing over a tensor-parallel group counts every element once.
template <class Tensor>
[[nodiscard]] bool holds_counted_copy(const Tensor& value) {
  const int rank = value.mesh().world().rank();
  for (int b = 0; b < value.block_count(); ++b) {
    const block_info& info = value.block(b);
    if (info.elements() > 0 && value.mapping().owner(info.row_offset, info.col_offset).rank != rank) return false;
  }
  return true;
}

// What an update or a checkpoint knows of the parameter `name` whose value is `value`.
template <class Tensor>
[[nodiscard]] parameter_record record_of(const std::string& name, const Tensor& value) {
  parameter_record record{name, value.extents(), {}, holds_counted_copy(value)};
  record.blocks.reserve(static_cast<std::size_t>(value.block_count()));
  for (int b = 0; b < value.block_count(); ++b) record.blocks.push_back(value.block(b));
  return record;
}

// One parameter of a model, its type forgotten: what it is, and the four things an update does to it.
template <class Weight>
struct model_parameter {
  parameter_record record;
  parameter_shape shape;
  bool gradient_is_zero = true;  // when listed, on a rank that stores values
  std::function<void()> release_gradient;
  std::function<void(shared_buffer<Weight>)> bind_weights;
  std::function<void(shared_buffer<float>)> bind_gradient;
  std::function<void()> restore_gradient;  // zeros of its own again, if its gradient is not bound
};

// Instantiated once per pair of types, however many parameters have them: a model of float
// parameters refused for a bf16 update is one error, not one per kind of parameter tensor.
template <class Element, class Weight>
constexpr bool weights_are_parameters() {
  static_assert(std::is_same_v<Element, Weight>,
                "shardwise: an update built from a model keeps the model's weights in its flat buffers, so "
                "its Weight is the parameters' element type: float parameters take Weight = float, bf16 "
                "parameters (with float gradients and float32 master weights) Weight = bf16");
  return std::is_same_v<Element, Weight>;
}

// The parameters of `model` in for_each_parameter's order, each holding a reference to the model's
// parameter: the model outlives the list.
template <class Weight, parameterised Model>
[[nodiscard]] std::vector<model_parameter<Weight>> model_parameters(Model& model) {
  std::vector<model_parameter<Weight>> parameters;
  const bool values = element_memory::stored_on_this_thread();
  model.for_each_parameter([&](const std::string& name, auto& p) {
    using element = typename std::remove_cvref_t<decltype(p.value)>::value_type;
    if constexpr (weights_are_parameters<element, Weight>()) {
      model_parameter<Weight> parameter;
      parameter.record = record_of(name, p.value);
      parameter.shape = local_shape(p.value);
      parameter.gradient_is_zero = !values || std::ranges::none_of(p.gradient.data(), [](auto g) { return g != 0; });
      parameter.release_gradient = [&p] { p.gradient.release(); };
      parameter.bind_weights = [&p](shared_buffer<Weight> storage) { p.value.bind(std::move(storage)); };
      parameter.bind_gradient = [&p](shared_buffer<float> storage) { p.gradient.bind(std::move(storage)); };
      parameter.restore_gradient = [&p] {
        if (!p.gradient.is_bound())
          p.gradient = std::remove_cvref_t<decltype(p.gradient)>(p.gradient.mesh(), p.gradient.extents());
      };
      parameters.push_back(std::move(parameter));
    }
  });
  return parameters;
}

}  // namespace detail
}  // namespace shardwise::optim
