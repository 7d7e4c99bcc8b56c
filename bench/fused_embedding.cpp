// The fused embedding-bag + all-to-all beside its baseline (Punniyamurthy et al.'s study).
//
// model/…   the MI210 + InfiniBand machine of the paper (sim/presets.hpp: 2 nodes of 1 GPU), from
//           fused/embedding_cost.hpp's predict() — the rules the sim_gpu backend runs with real data
//           (tested equal), without data, so the paper's shapes (embedding dimension 256, up to 4096 ×
//           256 bags per GPU) take milliseconds. The reported time is the fused kernel's modelled
//           time; counters: baseline, compute and communication parts (µs), fused / baseline, the
//           overlap efficiency E, what the automatic path takes (fused / baseline, with the pooling
//           the user declares and with the conservative default), each node's fused time, and the
//           same figures with the slice size the model chooses (automatic_slice_rows).
//     grid/B/T            global batch B × tables per GPU T, slices of 32, bags of 10 (DLRM's
//                         generator default) — and grid_pooling70/ with bags of 70 (the paper's Table 2)
//     slices/S            B = 1024, T = 256, slice size S
//     order/B/T/aware|oblivious  per-node times of the two slice orders (the skew between nodes)
//     small/B/T/S         tiny batches and slices, where the automatic path must not lose
// threads/… wall time at 8 ranks as threads, fused (zero copy, epoch flags) vs baseline
//           (pool, all_to_all_v, unpack), slowest rank, a batch of 2048 bags over 32 tables of 64
//           floats, bags of 10.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "slowest_rank.hpp"
#include "shardwise/comm/threads.hpp"
#include "shardwise/fused/embedding_all_to_all.hpp"
#include "shardwise/fused/embedding_cost.hpp"
#include "shardwise/sim/presets.hpp"

namespace {

using namespace shardwise;

constexpr int embedding_dimension = 256;  // the paper's (DLRM's Criteo configuration)

void report_model(benchmark::State& state, std::int64_t batch, int tables_per_gpu, std::int64_t slice_rows,
                  std::int64_t bag_length, fused::slice_order order = fused::slice_order::communication_aware) {
  constexpr int gpus = 2;
  const auto machine = sim::presets::mi210_nodes(gpus, 1);
  const sim::gpu_initiated_model model{};
  const fused::embedding_shape shape{gpus * tables_per_gpu, embedding_dimension, batch};
  const fused::embedding_plan plan(shape, gpus, slice_rows, order);
  fused::embedding_times t;
  for (auto _ : state) {
    t = fused::predict(plan, machine, model, bag_length);
    state.SetIterationTime(t.fused);
  }
  // What operator() does: fused when the model predicts no loss, for the bags it is told to expect.
  auto automatic = [&](std::int64_t expected) {
    const auto guess = fused::predict(plan, machine, model, expected);
    return (guess.fused <= guess.baseline ? t.fused : t.baseline) / t.baseline;
  };
  state.counters["baseline_us"] = t.baseline * 1e6;
  state.counters["compute_us"] = t.compute * 1e6;
  state.counters["communication_us"] = t.communication * 1e6;
  state.counters["fused_us"] = t.fused * 1e6;
  state.counters["normalised"] = t.fused / t.baseline;
  state.counters["overlap_efficiency"] = t.overlap_efficiency();
  state.counters["automatic_normalised"] = automatic(bag_length);
  state.counters["automatic_default_normalised"] = automatic(fused::embedding_options{}.expected_bag_length);
  // With the slice size the operator chooses when told automatic_slice_rows (and the true bag length).
  const auto [best, chosen] = fused::best_slice_rows(shape, gpus, order, machine, model, bag_length);
  state.counters["chosen_slice_rows"] = static_cast<double>(best);
  state.counters["chosen_slice_normalised"] = chosen.fused / chosen.baseline;
  state.counters["chosen_slice_overlap_efficiency"] = chosen.overlap_efficiency();
  state.counters["node0_us"] = t.fused_by_rank[0] * 1e6;
  state.counters["node1_us"] = t.fused_by_rank[1] * 1e6;
}

void register_model() {
  for (const std::int64_t pooling : {10, 70})
    for (const std::int64_t batch : {256, 512, 1024, 2048, 4096})
      for (const int tables : {16, 64, 256})
        benchmark::RegisterBenchmark(
            ("model/" + std::string(pooling == 10 ? "grid/" : "grid_pooling70/") + std::to_string(batch) + "/" +
             std::to_string(tables)).c_str(),
            [=](benchmark::State& s) { report_model(s, batch, tables, 32, pooling); })
            ->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(1);
  for (const std::int64_t slice : {1, 2, 4, 8, 16, 32, 64, 128, 256})
    benchmark::RegisterBenchmark(("model/slices/" + std::to_string(slice)).c_str(),
                                 [=](benchmark::State& s) { report_model(s, 1024, 256, slice, 10); })
        ->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(1);
  for (const std::int64_t batch : {256, 512, 1024, 2048, 4096})
    for (const int tables : {16, 64, 256})
      for (const auto order : {fused::slice_order::communication_aware, fused::slice_order::oblivious})
        benchmark::RegisterBenchmark(
            ("model/order/" + std::to_string(batch) + "/" + std::to_string(tables) + "/" +
             (order == fused::slice_order::oblivious ? "oblivious" : "aware")).c_str(),
            [=](benchmark::State& s) { report_model(s, batch, tables, 32, 10, order); })
            ->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(1);
  for (const std::int64_t batch : {2, 8, 64})
    for (const int tables : {1, 16})
      for (const std::int64_t slice : {1, 4, 32})
        benchmark::RegisterBenchmark(("model/small/" + std::to_string(batch) + "/" + std::to_string(tables) + "/" +
                                      std::to_string(slice)).c_str(),
                                     [=](benchmark::State& s) { report_model(s, batch, tables, slice, 10); })
            ->UseManualTime()->Unit(benchmark::kMicrosecond)->Iterations(1);
}

// Wall time on threads: every rank builds its tables and bags, then runs the chosen path.
void on_threads(benchmark::State& state, fused::path which) {
  constexpr int ranks = 8, tables = 32, dimension = 64, table_rows = 20000, bag_length = 10;
  constexpr std::int64_t batch = 2048;
  constexpr long long iterations = 30;
  threads::run(ranks, [&](threads::communicator& comm) {
    fused::embedding_options options;
    options.choice = which;
    fused::embedding_all_to_all op(comm, {tables, dimension, batch}, options);
    std::vector<std::vector<float>> weights;
    std::vector<std::int64_t> offsets, indices;
    for (std::int64_t b = 0; b <= batch; ++b) offsets.push_back(b * bag_length);
    for (std::int64_t i = 0; i < batch * bag_length; ++i) indices.push_back((i * 7919 + comm.rank()) % table_rows);
    std::vector<std::span<const float>> table_spans;
    for (int t = 0; t < op.plan().tables_of(comm.rank()); ++t)
      weights.emplace_back(static_cast<std::size_t>(table_rows * dimension), 0.001F * static_cast<float>(t + 1));
    for (const auto& w : weights) table_spans.emplace_back(w);
    const std::vector<fused::embedding_bags> bags(weights.size(), fused::embedding_bags{offsets, indices});
    bench::measure(comm.rank() == 0 ? &state : nullptr, iterations, comm,
                   [&] { benchmark::DoNotOptimize(op(table_spans, bags).data()); });
  });
}

void register_threads() {
  benchmark::RegisterBenchmark("threads/fused/8", [](benchmark::State& s) { on_threads(s, fused::path::fused); })
      ->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(30);
  benchmark::RegisterBenchmark("threads/baseline/8", [](benchmark::State& s) { on_threads(s, fused::path::baseline); })
      ->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(30);
}

}  // namespace

int main(int argc, char** argv) {
  register_model();
  register_threads();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
