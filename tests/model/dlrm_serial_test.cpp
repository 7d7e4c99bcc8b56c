// The serial DLRM of the DLRM test (dlrm_serial.hpp) against central differences of its own loss: its
// gradients of dense weights, biases and table rows. It needs no backend, so it compiles and runs once,
// not in each backend's build of the DLRM test.
#include <gtest/gtest.h>

#include "model/dlrm_checks.hpp"
#include "model/dlrm_serial.hpp"
#include "shardwise/comm/threads.hpp"
#include "shardwise/mesh/data_parallel_mesh.hpp"

namespace {

using namespace shardwise;
using namespace shardwise::testing;

TEST(dlrm_serial, gradients_agree_with_central_differences) {
  threads::run(1, [](threads::communicator& comm) {
    const auto c = config_with(fused::pooling::mean);
    data_parallel_mesh mesh(comm, 1, {1});
    model::dlrm<double, threads::communicator> distributed(mesh, c, batch);
    auto s = serial_of(distributed, c);
    const auto tables = all_tables();
    const auto b = generator().batch<double>(data::dlrm_stream::training, 0, batch, 0, batch, tables);
    serial_dlrm::gradients g;
    (void)s.loss(b, &g);
    const double h = 1e-6;
    const auto central = [&](double& x) {
      const double kept = x;
      x = kept + h;
      const double up = s.loss(b, nullptr);
      x = kept - h;
      const double down = s.loss(b, nullptr);
      x = kept;
      return (up - down) / (2 * h);
    };
    for (const auto* name : {"bottom.0.weight", "bottom.1.bias", "top.0.weight", "top.1.weight", "top.1.bias"})
      for (const Eigen::Index i : {0, 1}) {
        auto& x = s.dense[name](i % s.dense[name].rows(), 0);
        EXPECT_NEAR(g.dense[name](i % s.dense[name].rows(), 0), central(x), 1e-6) << name;
      }
    for (std::size_t t = 0; t < s.tables.size(); ++t) {
      const auto row = b.sparse[t].indices.empty() ? 0 : b.sparse[t].indices.front();
      EXPECT_NEAR(g.tables[t](row, 1), central(s.tables[t](row, 1)), 1e-6) << "table " << t;
    }
  });
}

}  // namespace
