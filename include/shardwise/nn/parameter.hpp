#pragma once
// parameter<T, Layout, Mesh>: a trainable distributed tensor and its gradient, of one layout.
//
// Backward passes add into the gradient (add_gradient), so the gradients of a weight used twice (a
// tied embedding and output head) and of several micro-batches sum up; zero_gradient() clears it, as
// the update does after each step. Layers name their parameters (for_each_parameter(f, prefix) calls
// f(name, parameter)), and the name is how an optimizer, a checkpoint or a user finds one.
//
// Initial values come from a counter-based generator keyed by (seed, global row, global column)
// (core/counter_random.hpp), so a layer starts from the same weights whatever its layout and rank
// count — the serial model and every distributed one are the same model.
#include <algorithm>
#include <cstdint>

#include "shardwise/core/counter_random.hpp"
#include "shardwise/core/element.hpp"
#include "shardwise/core/kernel.hpp"
#include "shardwise/layout/layout.hpp"
#include "shardwise/tensor/accumulate.hpp"
#include "shardwise/tensor/dtensor.hpp"

namespace shardwise::nn {

// The element type of a parameter's gradient: float for bf16 weights, whose gradients are added up
// and reduced in float (as Megatron-LM does for bf16 models, and as XLA's float variables get them),
// the weights' own type otherwise.
template <class T>
using gradient_t = accumulator_t<T>;

template <class T, class Layout, class Mesh>
struct parameter {
  dtensor<T, Layout, Mesh> value;
  dtensor<gradient_t<T>, Layout, Mesh> gradient;

  // Zero gradient, value uniform in [-bound, bound) from `seed`.
  parameter(Mesh& mesh, matrix_extents extents, std::uint64_t seed, T bound)
      : value(from_function<Layout>(
            mesh, extents,
            [&](std::int64_t i, std::int64_t j) { return static_cast<T>((2 * uniform_at(seed, i, j) - 1) * bound); })),
        gradient(mesh, extents) {}
  // Every element `fill` (layer norm's gamma = 1, beta = 0).
  parameter(Mesh& mesh, matrix_extents extents, T fill)
      : value(from_function<Layout>(mesh, extents, [fill](std::int64_t, std::int64_t) { return fill; })),
        gradient(mesh, extents) {}

  void add_gradient(const dtensor<T, Layout, Mesh>& addend) { accumulate(gradient, addend); }
  void zero_gradient() {
    const auto elements = static_cast<double>(gradient.data().size());
    run_kernel(gradient.mesh().world(), {0, sizeof(gradient_t<T>) * elements}, "zero gradient",
               [&] { std::ranges::fill(gradient.data(), gradient_t<T>{}); });
  }

  // value -= rate * gradient on this rank's blocks; padding, zero in both, stays zero.
  void descend(gradient_t<T> rate) {
    auto v = value.data();
    const auto g = gradient.data();
    for (std::size_t i = 0; i < v.size(); ++i) v[i] -= rate * g[i];
  }
};

}  // namespace shardwise::nn
