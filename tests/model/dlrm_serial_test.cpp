// The serial DLRM of the DLRM test (dlrm_serial.hpp) against central differences of its own loss: its
// gradients of dense weights, biases and table rows; and the generated batches both read, sample by
// sample. It needs no backend, so it compiles and runs once, not in each backend's build of the DLRM test.
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

// The DLRM test compares a distributed model with the serial one on the same generated batch, so it
// cannot see the batch hold the wrong samples; here rows of a rank's part from a batch of a later step
// are the generator's samples first_sample + first_row + r, and bags are samples first_sample + s.
TEST(dlrm_generator, a_batch_holds_the_samples_from_its_first_sample_on) {
  const auto gen = generator();
  const auto stream = data::dlrm_stream::training;
  const std::int64_t first_sample = 2 * batch, first_row = 3, rows = 4, features = gen.config().dense_features;
  const auto tables = all_tables();
  const auto b = gen.batch<double>(stream, first_sample, batch, first_row, rows, tables);
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t sample = first_sample + first_row + r;
    EXPECT_EQ(b.labels[static_cast<std::size_t>(r)], gen.label(stream, sample)) << "sample " << sample;
    for (std::int64_t f = 0; f < features; ++f)
      EXPECT_EQ(b.dense[static_cast<std::size_t>(r * features + f)], gen.dense(stream, sample, f))
          << "sample " << sample;
  }
  for (std::size_t t = 0; t < tables.size(); ++t) {
    const auto& bags = b.sparse[t];
    for (std::int64_t s = 0; s < batch; ++s) {
      const auto begin = bags.offsets[static_cast<std::size_t>(s)], end = bags.offsets[static_cast<std::size_t>(s) + 1];
      ASSERT_EQ(end - begin, gen.bag_length(stream, first_sample + s, tables[t])) << "table " << t << ", bag " << s;
      for (auto i = begin; i < end; ++i)
        EXPECT_EQ(bags.indices[static_cast<std::size_t>(i)], gen.index(stream, first_sample + s, tables[t], i - begin));
    }
  }
}

}  // namespace
