// The DLRM test's training steps: steps of sharded_update + sparse_update on one batch lower the loss
// (dlrm_test.cpp describes the test; dlrm_checks.hpp says why this compiles apart).
#include <gtest/gtest.h>

#include <type_traits>

#include "model/dlrm_checks.hpp"
#include "shardwise/data/dlrm_generator.hpp"
#include "shardwise/model/dlrm.hpp"
#include "shardwise/optim/adam.hpp"
#include "shardwise/optim/rowwise_adagrad.hpp"
#include "shardwise/optim/sharded.hpp"
#include "shardwise/optim/sparse_update.hpp"
#include "support/backends.hpp"

namespace {

using namespace shardwise;
using namespace shardwise::testing;

TYPED_TEST(dlrm_model, steps_of_the_sharded_and_sparse_updates_lower_the_loss) {
  TypeParam::run(
      [](communicator auto& world) {
        using Comm = std::remove_cvref_t<decltype(world)>;
        data_parallel_mesh mesh(world, world.size(), {1});
        const auto c = config_with(fused::pooling::sum);
        model::dlrm<float, Comm> m(mesh, c, batch);
        optim::sharded_update<optim::adam> dense(m, mesh.data(), optim::adam{});
        optim::sparse_update<optim::rowwise_adagrad> tables(m);
        const auto b =
            generator().batch<float>(data::dlrm_stream::training, 0, batch, m.first_row(), m.rows(), m.input_tables());
        const double first = m.forward(b);
        double last = first;
        for (int step = 0; step < 30; ++step) {
          m.backward();
          dense.step(mesh.data(), mesh.tensor_parallel().world(), {0.01f, 0.0f});
          tables.step(mesh.tensor_parallel().world(), 0.1f);
          last = m.forward(b);
        }
        EXPECT_LT(last, 0.5 * first) << "30 steps on one batch should fit it";
      },
      {1, 2, 4});
}

}  // namespace
