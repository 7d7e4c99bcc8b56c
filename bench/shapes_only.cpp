// bench/shapes_only: how far shapes-only simulation (sim_gpu::execution::shapes_only) scales on this
// machine, on simulated MI210s (presets::mi210_nodes: nodes of 4), each rank a thread, at 64, 512 and
// 4096 ranks. No element is computed or moved, so the wall time is the library's own work per rank
// (layouts, kernels priced, collectives costed) and the threads' meeting.
//   block_3d/P  one step (forward + backward) of a Transformer block of the 3-D family on a p x p x p
//               cube, p = 4, 8, 16; the same block at every P: width 2048, 16 heads, 256 sequences of
//               128 (32768 rows), MLP width 8192, float.
//   gpt/P       one training step of model::gpt (4 blocks of width 1024, 16 heads, vocabulary 8192,
//               context 128) in the 3-D family on 4 x 4 x 4 ranks, P / 64 replicas of it on the data
//               axis, 16 sequences per replica, and the sharded AdamW update with gradient clipping
//               (optim/sharded.hpp): forward, backward, update.
//   bench_shapes_only --benchmark_filter=/gpt/4096/ --benchmark_out=shapes_only_gpt_4096.json
//   --benchmark_out_format=json
// Reported time: the run's wall time (manual time, one iteration). Counters: step_ms, the step's modelled
// time, from a barrier after the setup to the next (the slowest rank's); memory_mib, the largest high-water mark of
// element storage and working memory over the ranks (what a GPU would hold, not this process); sent_mib, the most a
// rank sent; peak_rss_mib, this process's peak resident memory so far (getrusage), which is the run's own only when one
// step and P run per process, as scripts/bench-shapes-only does.
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "shardwise/mesh/data_parallel_mesh.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/model/gpt.hpp"
#include "shardwise/nn/transformer_block.hpp"
#include "shardwise/optim/adamw.hpp"
#include "shardwise/optim/sharded.hpp"
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

// Runs `body` on `ranks` simulated MI210s with shapes only and reports the run as the header says;
// `body` sets up, then returns the modelled seconds of its step (timed_step).
template <class Body>
void measure(benchmark::State& state, int ranks, Body body) {
  for (auto _ : state) {
    double step_seconds = 0;
    const auto start = std::chrono::steady_clock::now();
    const auto report = sim_gpu::run(
        ranks, sim::presets::mi210_nodes(ranks),
        [&](sim_gpu::communicator& world) {
          const double seconds = body(world);
          if (world.rank() == 0) step_seconds = seconds;
        },
        sim_gpu::execution::shapes_only);
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    std::int64_t sent = 0;
    for (const auto& t : report.traffic) sent = std::max(sent, t.bytes_sent);
    state.counters["step_ms"] = step_seconds * 1e3;
    state.counters["memory_mib"] = static_cast<double>(report.largest_memory_high_water()) / mib;
    state.counters["sent_mib"] = static_cast<double>(sent) / mib;
  }
  state.counters["peak_rss_mib"] = peak_resident_mib();
}

// The modelled seconds of `step`, from a barrier (every rank's streams drained) to the next, so that
// building the model and the update is left out.
template <class Step>
double timed_step(sim_gpu::communicator& world, Step step) {
  const double start = world.synchronized_now();
  step();
  return world.synchronized_now() - start;
}

void block_step(benchmark::State& state, int p) {
  measure(state, p * p * p, [&](sim_gpu::communicator& world) {
    process_mesh mesh(world, {p, p, p});
    using family = nn::tensor_parallel_3d<>;
    nn::transformer_block<float, family, decltype(mesh)> block(mesh, options, 1);
    const matrix_extents extents{batch * options.sequence, options.hidden};
    const dtensor<float, family::input, decltype(mesh)> x(mesh, extents);
    const dtensor<float, family::input, decltype(mesh)> dy(mesh, extents);
    return timed_step(world, [&] {
      (void)block.forward(x);
      (void)block.backward(dy);
    });
  });
}

constexpr model::gpt_config gpt_config{
    .vocabulary = 8192, .context = 128, .hidden = 1024, .heads = 16, .layers = 4, .expansion = 4};
constexpr std::int64_t sequences_per_replica = 16;

void gpt_step(benchmark::State& state, int ranks) {
  measure(state, ranks, [&](sim_gpu::communicator& world) {
    data_parallel_mesh mesh(world, ranks / 64, coordinates<3>{4, 4, 4});
    using tensor_parallel_mesh = std::remove_cvref_t<decltype(mesh.tensor_parallel())>;
    model::gpt<float, nn::tensor_parallel_3d<>, tensor_parallel_mesh> gpt(mesh.tensor_parallel(), gpt_config);
    optim::sharded_update<optim::adamw> update(gpt, mesh.data());
    // Token ids only steer which rank's vocabulary rows are read; their values cost nothing.
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(sequences_per_replica * gpt_config.context));
    for (std::size_t t = 0; t < tokens.size(); ++t)
      tokens[t] = static_cast<std::int32_t>((t * 7919 + static_cast<std::size_t>(mesh.replica())) %
                                            static_cast<std::size_t>(gpt_config.vocabulary));
    return timed_step(world, [&] {
      (void)gpt.forward(tokens, tokens);
      gpt.backward();
      (void)update.step(mesh.data(), mesh.tensor_parallel().world(), {3e-4f, 1.0f});
    });
  });
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  for (const int p : {4, 8, 16})
    benchmark::RegisterBenchmark(("shapes_only/block_3d/" + std::to_string(p * p * p)).c_str(), block_step, p)
        ->Iterations(1)
        ->UseManualTime()
        ->Unit(benchmark::kSecond);
  for (const int ranks : {64, 512, 4096})
    benchmark::RegisterBenchmark(("shapes_only/gpt/" + std::to_string(ranks)).c_str(), gpt_step, ranks)
        ->Iterations(1)
        ->UseManualTime()
        ->Unit(benchmark::kSecond);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
