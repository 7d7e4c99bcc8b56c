// One DLRM training step (forward, backward, sharded Adam on the MLPs, row-wise Adagrad on the touched
// table rows) three ways, side by side in one run: the embedding unfused (pool, all-to-all, unpack;
// pack, all-to-all, scatter-add), fused in the forward only (the paper's), and fused in the forward and
// the backward (the paper's future work).
//
// threads/<shape>       8 ranks as threads, wall time of the slowest rank. Each iteration runs the
//                       three steps in turns on the same batch (which goes first rotates): on a machine
//                       whose speed drifts, the three steps of an iteration see the same state.
//                       Counters: each way's median step (unfused_ms, forward_fused_ms, fused_ms) and
//                       time in the embedding layer (…_embedding_ms), and the medians of the
//                       iterations' ratios (forward_fused_over_unfused, fused_over_unfused)
// sim/<GxK>/<shape>     8 simulated MI210s, in 8 nodes of 1 and in 2 nodes of 4 (InfiniBand between
//                       nodes, xGMI inside), modelled time of one step each way after an untimed one,
//                       from the ranks' meeting with their devices drained to the next: every kernel
//                       (the sparse optimizer's included) and every collective take the models' time
// sim/128/<shape>       the paper's scale-out study (its Table 2): 128 MI210s, one a node, in a 16 x 8
//                       torus of 200 Gb/s links (sim::presets::mi210_torus), a DLRM of 43 MLP layers of
//                       682 and embeddings of width 92 pooled from bags of 70; run with shapes only
//                       Both sim rows also count memory_mib: the largest GPU's high-water mark of
//                       element storage (weights, gradients, optimizer state, tables) and working
//                       memory
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "benchmark_main.hpp"
#include "shardwise/comm/threads.hpp"
#include "shardwise/data/dlrm_generator.hpp"
#include "shardwise/model/dlrm.hpp"
#include "shardwise/optim/adam.hpp"
#include "shardwise/optim/rowwise_adagrad.hpp"
#include "shardwise/optim/sharded.hpp"
#include "shardwise/optim/sparse_update.hpp"
#include "shardwise/sim/presets.hpp"
#include "shardwise/sim/sim_gpu.hpp"
#include "slowest_rank.hpp"

namespace {

using namespace shardwise;

constexpr int ranks = 8;

struct dlrm_shape {
  std::string name;
  int tables_per_rank;
  std::int64_t rows;
  int dimension;
  std::int64_t bag_length;
  std::int64_t batch;
  std::vector<std::int64_t> bottom, top;
};

// small_mlp: the embedding's share of the step is large; paper_like: the paper's scale-out DLRM's
// embedding width 92 and bags of 70 (its Table 2), with MLPs of its average width 682, fewer layers.
const std::vector<dlrm_shape> threads_shapes = {
    {"small_mlp", 8, 20000, 32, 10, 2048, {64, 32}, {64, 1}},
    {"wide_mlp", 8, 20000, 64, 10, 2048, {512, 256, 64}, {512, 256, 1}},
};
const std::vector<dlrm_shape> sim_shapes = {
    {"small_mlp", 8, 20000, 32, 10, 2048, {64, 32}, {64, 1}},
    {"paper_like", 8, 10000, 92, 70, 1024, {682, 92}, {682, 682, 1}},
};
// The paper's 43 layers: 21 of 682 and the embedding width at the bottom, 20 of 682 and the
// prediction at the top. It gives no batch nor table count: 32 samples and a table a GPU (more tables
// widen the dot-product interaction, and the top MLP's first layer with it, as their square).
const dlrm_shape scale_out_shape = [] {
  dlrm_shape s{"paper_scale_out",
               1,
               10000,
               92,
               70,
               32 * 128,
               std::vector<std::int64_t>(21, 682),
               std::vector<std::int64_t>(20, 682)};
  s.bottom.push_back(92);
  s.top.push_back(1);
  return s;
}();

// The three ways, in the order of the counters.
constexpr std::array<std::array<fused::path, 2>, 3> ways = {{{fused::path::baseline, fused::path::baseline},
                                                             {fused::path::fused, fused::path::baseline},
                                                             {fused::path::fused, fused::path::fused}}};
constexpr std::array<const char*, 3> way_names = {"unfused", "forward_fused", "fused"};

// One rank's model, updates and batch.
template <class Comm>
struct training {
  data_parallel_mesh<Comm, 1> mesh;
  model::dlrm<float, Comm> dlrm;
  optim::sharded_update<optim::adam> dense;
  optim::sparse_update<optim::rowwise_adagrad> tables;
  model::dlrm_batch<float> batch;

  training(Comm& world, const dlrm_shape& s)
      : mesh(world, world.size(), {1}),
        dlrm(mesh, config(s, world.size()), s.batch),
        dense(dlrm, mesh.data(), optim::adam{}),
        tables(dlrm),
        batch(generator(s, world.size())
                  .template batch<float>(data::dlrm_stream::training, 0, s.batch, dlrm.first_row(), dlrm.rows(),
                                         dlrm.input_tables())) {}

  static model::dlrm_config config(const dlrm_shape& s, int P) {
    model::dlrm_config c;
    c.bottom = s.bottom;
    c.top = s.top;
    for (int t = 0; t < s.tables_per_rank * P; ++t)
      c.tables.push_back({s.rows, s.dimension, fused::table_sharding::table_wise});
    return c;
  }
  static data::dlrm_generator generator(const dlrm_shape& s, int P) {
    data::dlrm_data_config c;
    c.table_rows.assign(static_cast<std::size_t>(s.tables_per_rank * P), s.rows);
    c.min_bag_length = c.max_bag_length = s.bag_length;
    return data::dlrm_generator(c);
  }

  void step(const std::array<fused::path, 2>& way) {
    dlrm.embedding().fused_operator().choose_paths(way[0], way[1]);
    (void)dlrm.forward(batch);
    dlrm.backward();
    (void)dense.step(mesh.data(), mesh.tensor_parallel().world(), {1e-4f, 0.0f});
    tables.step(mesh.tensor_parallel().world(), 1e-3f);
  }
  [[nodiscard]] double embedding_seconds() const {
    return dlrm.seconds_in_embedding().forward + dlrm.seconds_in_embedding().backward;
  }
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

void measure_threads(benchmark::State& state, const dlrm_shape& shape) {
  std::array<std::vector<double>, 3> seconds, in_embedding;
  std::array<std::vector<double>, 2> ratios;  // forward fused, fused: over unfused
  const auto iterations = state.max_iterations;
  threads::run(ranks, [&](threads::communicator& comm) {
    training<threads::communicator> t(comm, shape);
    for (const auto& way : ways) t.step(way);  // first touches, on every path
    for (benchmark::IterationCount i = 0; i < iterations; ++i) {
      std::array<double, 3> mine{};
      for (std::size_t k = 0; k < ways.size(); ++k) {
        const auto w = (k + static_cast<std::size_t>(i)) % ways.size();
        mine[w] = bench::slowest(comm, [&] { t.step(ways[w]); });
        double embedding = t.embedding_seconds();
        comm.all_reduce(std::span<double>(&embedding, 1), op::max);
        if (comm.rank() == 0) in_embedding[w].push_back(embedding);
      }
      if (comm.rank() != 0) continue;
      for (std::size_t w = 0; w < ways.size(); ++w) seconds[w].push_back(mine[w]);
      ratios[0].push_back(mine[1] / mine[0]);
      ratios[1].push_back(mine[2] / mine[0]);
    }
  });
  std::size_t i = 0;
  for (auto _ : state) state.SetIterationTime(seconds[2][i++]);
  for (std::size_t w = 0; w < ways.size(); ++w) {
    state.counters[std::string(way_names[w]) + "_ms"] = 1e3 * median(seconds[w]);
    state.counters[std::string(way_names[w]) + "_embedding_ms"] = 1e3 * median(in_embedding[w]);
  }
  state.counters["forward_fused_over_unfused"] = median(ratios[0]);
  state.counters["fused_over_unfused"] = median(ratios[1]);
}

void measure_simulated(benchmark::State& state, const dlrm_shape& shape, const sim::machine& machine,
                       sim_gpu::execution how = sim_gpu::execution::full) {
  std::array<double, 3> seconds{};
  const auto report = sim_gpu::run(
      machine.network.devices(), machine,
      [&](sim_gpu::communicator& comm) {
        training<sim_gpu::communicator> t(comm, shape);
        for (std::size_t w = 0; w < ways.size(); ++w) {
          t.step(ways[w]);
          // From the ranks' meeting with their devices drained to their next such meeting: the step's
          // every kernel, the sparse update's last, counted in it.
          const double start = comm.synchronized_now();
          t.step(ways[w]);
          const double end = comm.synchronized_now();
          if (comm.rank() == 0) seconds[w] = end - start;
        }
      },
      how);
  for (auto _ : state) state.SetIterationTime(seconds[2]);
  for (std::size_t w = 0; w < ways.size(); ++w) state.counters[std::string(way_names[w]) + "_ms"] = 1e3 * seconds[w];
  state.counters["forward_fused_over_unfused"] = seconds[1] / seconds[0];
  state.counters["fused_over_unfused"] = seconds[2] / seconds[0];
  state.counters["memory_mib"] = static_cast<double>(report.largest_memory_high_water()) / (1 << 20);
}

}  // namespace

int main(int argc, char** argv) {
  return bench::run_benchmarks(argc, argv, [] {
    for (const auto& shape : threads_shapes)
      benchmark::RegisterBenchmark(("threads/" + shape.name).c_str(),
                                   [shape](benchmark::State& s) { measure_threads(s, shape); })
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond)
          ->Iterations(9);
    for (const int per_node : {1, 4})
      for (const auto& shape : sim_shapes)
        benchmark::RegisterBenchmark(("sim/8x" + std::to_string(per_node) + "/" + shape.name).c_str(),
                                     [shape, per_node](benchmark::State& s) {
                                       measure_simulated(s, shape, sim::presets::mi210_nodes(ranks, per_node));
                                     })
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond)
            ->Iterations(1)
            ->Repetitions(1);  // modelled time: every run gives the same
    benchmark::RegisterBenchmark(("sim/128/" + scale_out_shape.name).c_str(),
                                 [](benchmark::State& s) {
                                   measure_simulated(s, scale_out_shape, sim::presets::mi210_torus(16, 8),
                                                     sim_gpu::execution::shapes_only);
                                 })
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond)
        ->Iterations(1)
        ->Repetitions(1);
    return true;
  });
}
