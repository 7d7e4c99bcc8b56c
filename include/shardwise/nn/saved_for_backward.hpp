#pragma once
// What a layer keeps from its forward pass for its backward pass, given up by the backward that uses
// it, as PyTorch frees a graph's saved tensors: a training step's optimizer then runs beside the
// parameters and their gradients alone, and the activations of one forward never meet the next's.
//
//   const auto input = take_saved(input_, rank, "nn::linear::backward", "its input");
//
// What is kept is a std::optional, or a std::shared_ptr to a const value where layers that read the
// same input keep it once between them (the three projections of attention). A backward with nothing
// kept (no forward before it, a second backward of one forward, or a forward under nn::no_grad, which
// keeps nothing: nn/no_grad.hpp) throws argument_error naming the call.
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "shardwise/core/error.hpp"
#include "shardwise/nn/no_grad.hpp"

namespace shardwise::nn {

namespace detail {
template <class Kept>
void check_kept(const Kept& saved, int rank, std::string_view call, std::string_view what) {
  if (!saved)
    throw argument_error(rank, std::string(call),
                         "backward without a forward before it: the layer keeps " + std::string(what) +
                             " from a forward until the backward that uses it (nothing under nn::no_grad)");
}
}  // namespace detail

template <class Saved>
[[nodiscard]] Saved take_saved(std::optional<Saved>& saved, int rank, std::string_view call, std::string_view what) {
  detail::check_kept(saved, rank, call, what);
  Saved taken = std::move(*saved);
  saved.reset();
  return taken;
}

template <class Saved>
[[nodiscard]] std::shared_ptr<const Saved> take_saved(std::shared_ptr<const Saved>& saved, int rank,
                                                      std::string_view call, std::string_view what) {
  detail::check_kept(saved, rank, call, what);
  return std::exchange(saved, nullptr);
}

}  // namespace shardwise::nn
