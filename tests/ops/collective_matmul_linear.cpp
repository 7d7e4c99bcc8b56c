// The collective matmul test's linear layers (collective_matmul_test.cpp describes the test), compiled
// in a source of their own (collective_matmul_checks.hpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>

#include "ops/collective_matmul_checks.hpp"
#include "ops/matmul_checks.hpp"
#include "shardwise/comm/path_trial.hpp"
#include "shardwise/comm/reduction.hpp"
#include "shardwise/layout/cube_3d.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/nn/linear.hpp"
#include "support/backends.hpp"

namespace {

using namespace shardwise;
using namespace shardwise::testing;

// The linear layers: sequence-parallel 1-D linears through the rings, unfused, or choosing, and a 3-D
// linear in bands, equal the serial layer forward and backward.
template <class Layer, class Mesh>
void check_linear(Mesh& mesh, Layer& layer, std::int64_t m, std::int64_t k, std::int64_t n) {
  const matrix x = integers({m, k}, 7);
  const matrix dy = integers({m, n}, 8);
  const matrix w = all_gather(layer.weight().value);
  layer.weight().zero_gradient();
  layer.bias().zero_gradient();
  const auto y = layer.forward(distributed<typename Layer::input_type::layout_type>(mesh, x));
  expect_equals_serial(y, x * w, 1e-12);
  const auto dx = layer.backward(distributed<typename Layer::output_layout>(mesh, dy));
  expect_equals_serial(dx, dy * w.transpose(), 1e-12);
  expect_equals_serial(layer.weight().gradient, x.transpose() * dy, 1e-12);
  expect_equals_serial(layer.bias().gradient, matrix(dy.colwise().sum()), 1e-12);
}

// A layer in one form, or left to choose: every call, while it measures and after, equals the serial
// layer, and within the trial's most calls every product has kept ring or unfused, alike on every rank.
template <class Layer, class Mesh>
void check_linear_in(collective_matmul_form asked, Mesh& mesh, Layer& layer, std::int64_t m, std::int64_t k,
                     std::int64_t n) {
  SCOPED_TRACE("form " + std::to_string(static_cast<int>(asked)));
  const auto forms = [&] {
    const auto f = layer.collective_forms();
    return std::array{f.forward, f.weight_gradient, f.input_gradient};
  };
  EXPECT_TRUE(std::ranges::all_of(forms(), [&](collective_matmul_form form) { return form == asked; }));
  const int calls = asked == collective_matmul_form::automatic ? 2 * path_trial::most_calls : 1;
  for (int call = 0; call < calls; ++call) check_linear(mesh, layer, m, k, n);
  for (const collective_matmul_form form : forms()) {
    EXPECT_NE(form, collective_matmul_form::automatic);
    std::array<int, 1> chosen{static_cast<int>(form)};
    mesh.world().all_reduce(std::span(chosen), op::max);
    EXPECT_EQ(chosen[0], static_cast<int>(form)) << "the ranks chose differently";
  }
}

TYPED_TEST(collective_matmul_test, linear_layers_use_the_collective_products) {
  TypeParam::run(
      [](communicator auto& world) {
        const int p = world.size();
        process_mesh line(world, {p});
        using Line = decltype(line);
        for (const auto form :
             {collective_matmul_form::ring, collective_matmul_form::unfused, collective_matmul_form::automatic}) {
          nn::linear<double, col_1d<padded>, row_1d<padded>, Line> gathering(line, 7, 9, 1, {.collective = form});
          static_assert(std::is_same_v<typename decltype(gathering)::output_layout, row_1d<padded>>);
          check_linear_in(form, line, gathering, 11, 7, 9);
          nn::linear<double, row_1d<ragged>, col_1d<ragged>, Line, col_1d<ragged>> scattering(line, 9, 7, 2,
                                                                                              {.collective = form});
          static_assert(std::is_same_v<typename decltype(scattering)::output_layout, col_1d<ragged>>);
          check_linear_in(form, line, scattering, 11, 9, 7);
        }

        if (p == 2) return;  // the 3-D bias lives on a diagonal: 1x1x1, 1x2x2 and 2x2x2 only
        process_mesh cube(world, {p == 8 ? 2 : 1, p == 1 ? 1 : 2, p == 1 ? 1 : 2});
        using Cube = decltype(cube);
        nn::linear<double, cube_3d<>::input, cube_3d<>::weight, Cube> banded(cube, 2 * p, 3 * p, 3, {.chunks = 3});
        check_linear(cube, banded, 4 * p, 2 * p, 3 * p);
      },
      {1, 2, 4, 8});
}

// Three linears that read one input, as Q, K and V do (linear::forward_sharing_input): each output, the
// input gradients' sum and every parameter's gradient equal the serial layers'; as rings the input's
// rows travel once for the three products, as one all-gather's; the first linear's choice decides for
// all, and all report it.
TYPED_TEST(collective_matmul_test, linears_sharing_an_input_gather_it_once) {
  TypeParam::run(
      [](communicator auto& world) {
        const std::int64_t p = world.size();
        process_mesh line(world, {static_cast<int>(p)});
        using layer = nn::linear<double, col_1d<padded>, row_1d<padded>, decltype(line)>;
        const std::int64_t m = 3 * p, k = 7, n = 9;
        const matrix x = integers({m, k}, 7);
        const std::array<matrix, 3> dy{integers({m, n}, 8), integers({m, n}, 9), integers({m, n}, 10)};
        for (const auto form :
             {collective_matmul_form::ring, collective_matmul_form::unfused, collective_matmul_form::automatic}) {
          SCOPED_TRACE("form " + std::to_string(static_cast<int>(form)));
          layer q(line, k, n, 1, {.collective = form}), key(line, k, n, 2, {.collective = form}),
              v(line, k, n, 3, {.collective = form});
          const std::array<layer*, 3> layers{&q, &key, &v};
          const auto input = distributed<col_1d<padded>>(line, x);
          const std::array gradients{distributed<row_1d<padded>>(line, dy[0]), distributed<row_1d<padded>>(line, dy[1]),
                                     distributed<row_1d<padded>>(line, dy[2])};
          matrix dx = matrix::Zero(m, k);
          for (std::size_t i = 0; i < 3; ++i) dx += dy[i] * all_gather(layers[i]->weight().value).transpose();
          const int calls = form == collective_matmul_form::automatic ? 2 * path_trial::most_calls : 1;
          for (int call = 0; call < calls; ++call) {
            for (layer* each : layers) {
              each->weight().zero_gradient();
              each->bias().zero_gradient();
            }
            const auto before = line.traffic();
            const auto outputs = layer::forward_sharing_input(input, {&q, &key, &v});
            if (form == collective_matmul_form::ring) {
              const std::int64_t bytes = (p - 1) * 3 * k * 8;
              EXPECT_EQ((line.traffic() - before).axes[0], (traffic_count{2 * (p - 1), bytes, bytes}));
            }
            for (std::size_t i = 0; i < 3; ++i)
              expect_equals_serial(outputs[i], x * all_gather(layers[i]->weight().value), 1e-12);
            const auto summed =
                layer::backward_sharing_input(input, {&q, &key, &v}, {&gradients[0], &gradients[1], &gradients[2]});
            static_assert(std::is_same_v<typename decltype(summed)::layout_type, col_1d<padded>>);
            expect_equals_serial(summed, dx, 1e-12);
            for (std::size_t i = 0; i < 3; ++i) {
              expect_equals_serial(layers[i]->weight().gradient, x.transpose() * dy[i], 1e-12);
              expect_equals_serial(layers[i]->bias().gradient, matrix(dy[i].colwise().sum()), 1e-12);
            }
          }
          const auto chosen = q.collective_forms();
          for (const auto f : {chosen.forward, chosen.weight_gradient, chosen.input_gradient})
            EXPECT_NE(f, collective_matmul_form::automatic);
          // The others report the forms of the rings they shared.
          for (const layer* other : {&key, &v}) {
            const auto reported = other->collective_forms();
            EXPECT_EQ(reported.forward, chosen.forward);
            EXPECT_EQ(reported.weight_gradient, chosen.weight_gradient);
            EXPECT_EQ(reported.input_gradient, chosen.input_gradient);
          }
        }
      },
      {1, 2, 3, 4});
}

}  // namespace
