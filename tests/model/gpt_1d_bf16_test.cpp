// The GPT test (gpt_test.cpp) in mixed precision: bf16 weights and activations, float gradients,
// every product and sum accumulated in float (docs/training.md). On every split of the world the model
// equals the bf16 model on one rank, and that model the float one, to bf16's precision: 0.1 relative,
// where a block in the wrong place or a sum left pending is off by its whole size. The 1-D family's
// model compiles here; the others in gpt_*_bf16.cpp.
#include <gtest/gtest.h>

#include <cstdint>

#include "model/gpt_checks.hpp"
#include "shardwise/core/bf16.hpp"
#include "support/backends.hpp"

namespace shardwise::testing {

template void expect_model_equals<bf16, gpt_family_1d>(family_mesh<gpt_family_1d>&, backend::communicator_type&,
                                                       std::int64_t, std::int64_t, const gpt_results<bf16>&, double,
                                                       nn::recomputation);

}  // namespace shardwise::testing

namespace {

using namespace shardwise;
using namespace shardwise::testing;
constexpr double bf16_tolerance = 0.1;

TYPED_TEST(gpt_test, loss_and_gradients_equal_one_rank_in_bf16) {
  TypeParam::run([](communicator auto& world) { check_every_mesh<bf16>(world, serial_gpt<bf16>(), bf16_tolerance); },
                 {1, 4, 8});
}

TEST(gpt_bf16, computes_the_float_models_loss_and_gradients_to_bf16_precision) {
  expect_equal(serial_gpt<bf16>(), serial_gpt<float>(), bf16_tolerance);
}

}  // namespace
