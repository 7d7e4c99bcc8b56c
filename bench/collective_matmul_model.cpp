// bench/collective_matmul_model: collective matmul in modelled time on simulated MI210s (sim_gpu,
// presets::mi210_nodes(P): nodes of 4 GPUs on xGMI, joined by InfiniBand), the rings beside their
// unfused forms, for the two products of a sequence-parallel GPT MLP block (hidden h, 4h inside):
//   model/gather/h/T/P    all_gather_matmul(X, W1): X T x h rows cut, W1 h x 4h columns cut
//   model/scatter/h/T/P   matmul_reduce_scatter(Y, W2): Y T x 4h columns cut, W2 4h x h rows cut
// at P = 4 (one node) and 8 (two), collectives and messages on a communication stream of their own;
// and the 3-D product (Bian et al.) on the 2x2x2 cube of P = 8, for the same block's two linears, up
// (h -> 4h) and down (4h -> h), with T x inputs activations A, an inputs x outputs weight W:
//   model/cube/<form>/<up|down>/h/T/8   forward A·W, input_gradient dC·Wᵀ, weight_gradient Aᵀ·dC,
//                                       pipelined in 4 bands (matmul_options::chunks = 4) beside the
//                                       plain product (chunks = 1)
// Reported time: the ring's (or the pipeline's) modelled time (manual time; the model is deterministic,
// one iteration).
// Counters, in µs of modelled time: fused_us; compute_us, the unfused form's GEMM alone, and
// communication_us, its collective alone (all_gather of X, reduce_scatter of the sum), whose sum is the
// unfused time; the overlap efficiency E = (compute + communication − fused) / min(compute,
// communication); fused / unfused. For the 3-D rows: fused_us (4 bands), unfused_us (one band) and
// fused_over_unfused only. The GEMMs compute real data: T stays small (what a piece's GEMM
// and transfer weigh against each other depends on h and P, not on T) and the run takes about 20 s
// on 2 cores (the 3-D rows, h = 512 and T = 8192, a few seconds more). Each ring's or pipeline's result
// equals its unfused form's exactly (small integers), or the run fails.
//   bench_collective_matmul_model --benchmark_out=collective_matmul_model.json --benchmark_out_format=json
//   bench_collective_matmul_model --trace=collective_matmul_trace.json   (also writes the timeline of
//       each product, ring then unfused, at P = 4 on the first shape; scripts/draw-trace draws it)
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

#include "shardwise/layout/cube_3d.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/ops/collective_matmul.hpp"
#include "shardwise/ops/matmul.hpp"
#include "shardwise/sim/presets.hpp"
#include "shardwise/sim/sim_gpu.hpp"
#include "shardwise/tensor/distribute.hpp"
#include "shardwise/tensor/dtensor.hpp"

namespace {

using namespace shardwise;

struct mlp_shape {
  std::int64_t hidden;
  std::int64_t tokens;
};
constexpr std::array shapes = {mlp_shape{1024, 2048}, mlp_shape{2048, 1024}, mlp_shape{4096, 512}};
constexpr std::array rank_counts = {4, 8};

// Small integers: every sum is exact in float, so the ring and the unfused form agree bit for bit.
float value_a(std::int64_t i, std::int64_t j) { return static_cast<float>((i * 3 + j * 5) % 9 - 4); }
float value_b(std::int64_t i, std::int64_t j) { return static_cast<float>((i * 7 + j * 2) % 7 - 3); }

struct modelled {
  double fused = 0;
  double compute = 0;
  double communication = 0;
  [[nodiscard]] double unfused() const { return compute + communication; }
  [[nodiscard]] double overlap_efficiency() const {
    return (compute + communication - fused) / std::min(compute, communication);
  }
};

// `operation()`'s modelled time, the slowest rank's from a moment all share to the end of its kernels.
template <class Operation>
auto timed(sim_gpu::communicator& world, double& seconds, Operation&& operation) {
  world.device().synchronize();
  world.barrier();
  const double start = world.now();
  auto result = operation();
  world.device().synchronize();
  double elapsed = world.now() - start;
  world.all_reduce(std::span(&elapsed, 1), op::max);
  seconds = elapsed;
  return result;
}

template <class Tensor>
void require_equal(const Tensor& ring, const Tensor& unfused, const char* product) {
  if (!std::ranges::equal(ring.data(), unfused.data()))
    throw std::runtime_error(std::string("bench_collective_matmul_model: ") + product +
                             " differs from its unfused form");
}

// One product, `gather` (all_gather_matmul) or not (matmul_reduce_scatter), on the mesh's ranks.
template <class Mesh>
modelled run_product(sim_gpu::communicator& world, Mesh& mesh, bool gather, const mlp_shape& s) {
  modelled m;
  auto& line = mesh.axis(0);
  const std::int64_t wide = 4 * s.hidden;
  if (gather) {
    const auto x = from_function<col_1d<>>(mesh, {s.tokens, s.hidden}, value_a);
    const auto w = from_function<row_1d<>>(mesh, {s.hidden, wide}, value_b);
    const auto ring = timed(world, m.fused, [&] { return all_gather_matmul(x, w); });
    const auto gathered = timed(world, m.communication, [&] {
      dtensor<float, replicated<>, Mesh> all(mesh, x.extents());
      line.all_gather(x.data(), all.data());
      return all;
    });
    require_equal(ring, timed(world, m.compute, [&] { return matmul(gathered, w); }), "all_gather_matmul");
  } else {
    const auto y = from_function<row_1d<>>(mesh, {s.tokens, wide}, value_a);
    const auto w = from_function<col_1d<>>(mesh, {wide, s.hidden}, value_b);
    const auto ring = timed(world, m.fused, [&] { return matmul_reduce_scatter(y, w); });
    const auto addends = timed(world, m.compute, [&] { return matmul(y, w); });
    require_equal(ring,
                  timed(world, m.communication,
                        [&] {
                          dtensor<float, col_1d<>, Mesh> sums(mesh, addends.extents());
                          line.reduce_scatter(addends.data(), sums.data());
                          return sums;
                        }),
                  "matmul_reduce_scatter");
  }
  return m;
}

// Runs body(world, mesh) on P simulated GPUs, communication on its own stream, after a tiny ring that makes
// the mesh's private axis (so no measurement includes that split). Returns the run's timeline when `record`.
template <class Body>
std::shared_ptr<const sim::timeline> on_gpus(int ranks, bool record, Body&& body) {
  auto machine = sim::presets::mi210_nodes(ranks);
  machine.record_timeline = record;
  return sim_gpu::run(ranks, machine,
                      [&](sim_gpu::communicator& world) {
                        world.use_stream(world.device().create_stream("communication"));
                        process_mesh mesh(world, {ranks});
                        (void)all_gather_matmul(from_function<col_1d<>>(mesh, {ranks, 1}, value_a),
                                                from_function<row_1d<>>(mesh, {1, ranks}, value_b));
                        body(world, mesh);
                      })
      .timeline;
}

void model(benchmark::State& state, bool gather, mlp_shape s, int ranks) {
  modelled m;
  on_gpus(ranks, false, [&](sim_gpu::communicator& world, auto& mesh) {
    const modelled mine = run_product(world, mesh, gather, s);
    if (world.rank() == 0) m = mine;
  });
  for (auto _ : state) state.SetIterationTime(m.fused);
  state.counters["fused_us"] = m.fused * 1e6;
  state.counters["compute_us"] = m.compute * 1e6;
  state.counters["communication_us"] = m.communication * 1e6;
  state.counters["unfused_us"] = m.unfused() * 1e6;
  state.counters["fused_over_unfused"] = m.fused / m.unfused();
  state.counters["overlap_efficiency"] = m.overlap_efficiency();
}

// The 3-D rows: one MLP block (hidden h, T tokens; many tokens, so that the activations, gathered in
// bands, outweigh the weights), the two linears of it, the three forms, the bands of the pipelined runs.
constexpr mlp_shape cube_block{512, 8192};
struct linear_shape {
  const char* name;
  std::int64_t inputs;
  std::int64_t outputs;
};
constexpr std::array cube_linears = {linear_shape{"up", cube_block.hidden, 4 * cube_block.hidden},
                                     linear_shape{"down", 4 * cube_block.hidden, cube_block.hidden}};
enum class cube_form { forward, input_gradient, weight_gradient };
constexpr std::array cube_form_names = {"forward", "input_gradient", "weight_gradient"};
constexpr int cube_bands = 4;

template <cube_form Form>
void cube_model(benchmark::State& state, linear_shape s) {
  double pipelined = 0;
  double plain = 0;
  sim_gpu::run(8, sim::presets::mi210_nodes(8), [&](sim_gpu::communicator& world) {
    world.use_stream(world.device().create_stream("communication"));
    process_mesh mesh(world, {2, 2, 2});
    const auto a = from_function<cube_3d<>::input>(mesh, {cube_block.tokens, s.inputs}, value_a);
    const auto w = from_function<cube_3d<>::weight>(mesh, {s.inputs, s.outputs}, value_b);
    const auto dc = from_function<cube_3d<>::output>(mesh, {cube_block.tokens, s.outputs}, value_b);
    const auto product = [&](int chunks) {
      const matmul_options options{.chunks = chunks};
      if constexpr (Form == cube_form::forward) {
        return matmul(a, w, options);
      } else if constexpr (Form == cube_form::input_gradient) {
        return matmul(dc, transposed(w), options);
      } else {
        return matmul(transposed(a), dc, options);
      }
    };
    double mine_pipelined = 0;
    double mine_plain = 0;
    const auto banded = timed(world, mine_pipelined, [&] { return product(cube_bands); });
    require_equal(banded, timed(world, mine_plain, [&] { return product(1); }), "the pipelined 3-D product");
    if (world.rank() == 0) {
      pipelined = mine_pipelined;
      plain = mine_plain;
    }
  });
  for (auto _ : state) state.SetIterationTime(pipelined);
  state.counters["fused_us"] = pipelined * 1e6;
  state.counters["unfused_us"] = plain * 1e6;
  state.counters["fused_over_unfused"] = pipelined / plain;
}

// Both products, ring then unfused, at P = 4 on the first shape, with the timeline written to `path`.
void write_trace(const std::string& path) {
  const auto trace = on_gpus(4, true, [](sim_gpu::communicator& world, auto& mesh) {
    for (const bool gather : {true, false}) (void)run_product(world, mesh, gather, shapes[0]);
  });
  trace->write_chrome_trace(path);
  std::printf("timeline: %s\n", path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  std::string trace_path;
  for (int i = 1; i < argc; ++i) {
    const std::string_view argument = argv[i];
    if (argument.starts_with("--trace=")) trace_path = argument.substr(8);
  }
  for (const bool gather : {true, false})
    for (const mlp_shape& s : shapes)
      for (const int ranks : rank_counts) {
        const std::string name = std::string("model/") + (gather ? "gather/" : "scatter/") + std::to_string(s.hidden) +
                                 "/" + std::to_string(s.tokens) + "/" + std::to_string(ranks);
        benchmark::RegisterBenchmark(name.c_str(), model, gather, s, ranks)
            ->Iterations(1)
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
      }
  using cube_run = void (*)(benchmark::State&, linear_shape);
  constexpr std::array<cube_run, 3> cube_runs = {cube_model<cube_form::forward>, cube_model<cube_form::input_gradient>,
                                                 cube_model<cube_form::weight_gradient>};
  for (std::size_t form = 0; form < cube_runs.size(); ++form)
    for (const linear_shape& s : cube_linears) {
      const std::string name = std::string("model/cube/") + cube_form_names[form] + "/" + s.name + "/" +
                               std::to_string(cube_block.hidden) + "/" + std::to_string(cube_block.tokens) + "/8";
      benchmark::RegisterBenchmark(name.c_str(), cube_runs[form], s)
          ->Iterations(1)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    }
  benchmark::RunSpecifiedBenchmarks();
  if (!trace_path.empty()) write_trace(trace_path);
  benchmark::Shutdown();
  return 0;
}
