// bench/shapes_only: how far shapes-only simulation (sim_gpu::execution::shapes_only) scales on this
// machine. One step (forward + backward) of a Transformer block of the 3-D family on a p x p x p cube
// of simulated MI210s (presets::mi210_nodes: nodes of 4), p = 4, 8, 16: 64, 512 and 4096 ranks, each a
// thread. The block is the same at every P: width 2048, 16 heads, 256 sequences of 128 (32768 rows), MLP
// width 8192, float; no element is computed or moved, so the wall time is the library's own work per
// rank (layouts, kernels priced, collectives costed) and the threads' meeting.
//   bench_shapes_only --benchmark_filter=/4096 --benchmark_out=shapes_only_4096.json --benchmark_out_format=json
// Reported time: the run's wall time (manual time, one iteration). Counters: step_ms, the step's modelled
// time (the slowest rank's); storage_mib, the largest high-water mark of element storage over the ranks
// (what a GPU would hold, not this process); sent_mib, the most a rank sent; peak_rss_mib, this process's
// peak resident memory so far (getrusage), which is the run's own only when one P runs per process, as
// scripts/bench-shapes-only does.
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>

#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/nn/transformer_block.hpp"
#include "shardwise/sim/presets.hpp"
#include "shardwise/sim/sim_gpu.hpp"

namespace {

using namespace shardwise;

constexpr nn::block_options options{.hidden = 2048, .heads = 16, .sequence = 128, .expansion = 4, .causal = true};
constexpr std::int64_t batch = 256;
constexpr double mib = 1 << 20;

double peak_resident_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) * 1024 / mib;  // ru_maxrss is in KiB on Linux
}

void block_step(benchmark::State& state, int p) {
  const int ranks = p * p * p;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    const auto report = sim_gpu::run(
        ranks, sim::presets::mi210_nodes(ranks),
        [&](sim_gpu::communicator& world) {
          process_mesh mesh(world, {p, p, p});
          using family = nn::tensor_parallel_3d<>;
          nn::transformer_block<float, family, decltype(mesh)> block(mesh, options, 1);
          const matrix_extents extents{batch * options.sequence, options.hidden};
          const dtensor<float, family::input, decltype(mesh)> x(mesh, extents);
          const dtensor<float, family::input, decltype(mesh)> dy(mesh, extents);
          (void)block.forward(x);
          (void)block.backward(dy);
        },
        sim_gpu::execution::shapes_only);
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    std::int64_t sent = 0;
    for (const auto& t : report.traffic) sent = std::max(sent, t.bytes_sent);
    state.counters["step_ms"] = report.makespan() * 1e3;
    state.counters["storage_mib"] =
        static_cast<double>(*std::max_element(report.memory_high_water.begin(), report.memory_high_water.end())) / mib;
    state.counters["sent_mib"] = static_cast<double>(sent) / mib;
  }
  state.counters["peak_rss_mib"] = peak_resident_mib();
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  for (const int p : {4, 8, 16})
    benchmark::RegisterBenchmark(("shapes_only/block_3d/" + std::to_string(p * p * p)).c_str(), block_step, p)
        ->Iterations(1)
        ->UseManualTime()
        ->Unit(benchmark::kSecond);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
