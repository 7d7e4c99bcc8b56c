// bench/weight_update: one data-parallel update step — gradient reduction, Adam update, weight
// gather — of a 16.7 M-parameter model (16 float32 matrices of 1024 × 1024) at P = 2 and P = 8,
// sharded_update vs replicated_update, side by side, on
//   threads – P threads of this process (under mpiexec: inside MPI rank 0, the other ranks asleep),
//   mpi     – P MPI processes (built with MPI and run under mpiexec with at least P ranks).
// The reference figures from the issue (PyTorch 1.13 ZeroRedundancyOptimizer over gloo on this
// machine): 118 ms at P = 2, 575 ms at P = 8; replicated Adam 128 / 688 ms.
// Also batching: 1000 tensors of 1–64 KiB through one sharded update (one bucket) against the same
// bytes as one tensor; the target is at least 0.8× the throughput of the concatenated call.
//   bench_weight_update --benchmark_out=weight_update.json --benchmark_out_format=json
//   mpiexec -n 8 --oversubscribe bench_weight_update …      (adds the mpi variants)
//   scripts/bench-weight-update                             (both, medians of repetitions, a table)
// Each iteration's time is rank 0's, from a barrier to a barrier, so it covers the slowest rank.
// The gradients are written once: the in-place reduce-scatter leaves the other blocks as they were,
// and the all-reduce leaves the sum, so later steps reduce values up to P times larger each step; the
// work is the same, and over a benchmark's few dozen steps they stay finite.
#include <benchmark/benchmark.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "benchmark_main.hpp"
#include "shardwise/comm/threads.hpp"
#include "shardwise/optim/adam.hpp"
#include "shardwise/optim/sgd.hpp"
#include "shardwise/optim/sharded.hpp"
#ifdef SHARDWISE_BENCH_MPI
#include "mpi_orders.hpp"
#include "shardwise/comm/mpi.hpp"
#endif

namespace {

namespace optim = shardwise::optim;
using shape_list = std::vector<optim::parameter_shape>;

const shape_list model(16, optim::parameter_shape{1024, 1024});

// Batching: 1000 tensors of 1–64 KiB (256–16384 floats) in one bucket, against one tensor of the same
// total size (the bytes pre-concatenated); SGD, so the step is mostly the two collectives.
const shape_list many_small = [] {
  shape_list shapes;
  for (std::size_t i = 0; i < 1000; ++i) shapes.push_back({1, 256 + (i * 7919) % (16384 - 256 + 1)});
  return shapes;
}();
const shape_list concatenated = [] {
  std::size_t total = 0;
  for (const auto& shape : many_small) total += shape.size();
  return shape_list{{1, total}};
}();

// One rank's part of a benchmark: build the update, then step while rank 0's benchmark loop (state is
// non-null on rank 0 only) asks for another step.
template <class Update, const shape_list& shapes>
void run_steps(shardwise::communicator auto& comm, benchmark::State* state) {
  Update update(comm, shapes);
  for (std::size_t t = 0; t < shapes.size(); ++t) {
    std::vector<float> values(shapes[t].size());
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>((i * 7 + t) % 13) * 0.01f;
    update.set_weights(t, values);
    const auto gradients = update.gradients(t);
    for (std::size_t i = 0; i < gradients.size(); ++i)
      gradients[i] = static_cast<float>((i + static_cast<std::size_t>(comm.rank())) % 5) * 0.1f - 0.2f;
  }
  int another = 1;
  const auto step = [&] {
    comm.broadcast(std::span<int>(&another, 1), 0);
    if (another == 0) return false;
    comm.barrier();
    const auto start = std::chrono::steady_clock::now();
    update.step(comm, 1e-3f);
    comm.barrier();
    if (state != nullptr)
      state->SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    return true;
  };
  if (state == nullptr) {
    while (step()) {
    }
    return;
  }
  for (auto _ : *state) step();
  another = 0;
  step();
  const auto parameters = update.layout().parameter_elements();
  state->counters["bytes_per_parameter"] = update.memory().bytes_per_parameter();
  state->counters["parameters"] = static_cast<double>(parameters);
  state->SetBytesProcessed(state->iterations() * static_cast<std::int64_t>(parameters * sizeof(float)));
}

// What is measured: a name, the update on threads, the update on MPI ranks, at which P.
struct workload {
  const char* name;
  void (*on_threads)(int ranks, benchmark::State& state);
#ifdef SHARDWISE_BENCH_MPI
  void (*on_mpi)(shardwise::mpi::communicator& part, benchmark::State* state);
#endif
  std::array<int, 2> rank_counts;
};

template <class Update, const shape_list& shapes>
constexpr workload make_workload(const char* name, std::array<int, 2> rank_counts) {
  return {name,
          [](int ranks, benchmark::State& state) {
            shardwise::threads::run(ranks, [&](shardwise::communicator auto& comm) {
              run_steps<Update, shapes>(comm, comm.rank() == 0 ? &state : nullptr);
            });
          },
#ifdef SHARDWISE_BENCH_MPI
          [](shardwise::mpi::communicator& part, benchmark::State* state) { run_steps<Update, shapes>(part, state); },
#endif
          rank_counts};
}

const std::array workloads = {
    make_workload<optim::sharded_update<optim::adam>, model>("weight_update/sharded", {2, 8}),
    make_workload<optim::replicated_update<optim::adam>, model>("weight_update/replicated", {2, 8}),
    make_workload<optim::sharded_update<optim::sgd>, many_small>("batching/1000_tensors", {8, 0}),
    make_workload<optim::sharded_update<optim::sgd>, concatenated>("batching/concatenated", {8, 0}),
};

#ifdef SHARDWISE_BENCH_MPI
// Rank 0 tells the other ranks which workload to run on its first `ranks` ranks (mpi_orders.hpp).
struct command {
  int workload = 0;
  int ranks = 0;
};

void run_on_mpi(shardwise::mpi::communicator& part, const command& order, benchmark::State* state) {
  workloads[static_cast<std::size_t>(order.workload)].on_mpi(part, state);
}
#endif

// Every workload at each of its rank counts on threads and, built with MPI, on the world's first ranks
// where it has enough (`driver` is null without MPI).
template <class Driver>
bool register_all([[maybe_unused]] Driver* driver, [[maybe_unused]] int world_size) {
  for (std::size_t w = 0; w < workloads.size(); ++w) {
    for (const int ranks : workloads[w].rank_counts) {
      if (ranks == 0) continue;
      const std::string suffix = "/" + std::to_string(ranks);
      benchmark::RegisterBenchmark((std::string(workloads[w].name) + "/threads" + suffix).c_str(),
                                   [w, ranks](benchmark::State& state) { workloads[w].on_threads(ranks, state); })
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
#ifdef SHARDWISE_BENCH_MPI
      if (ranks > world_size) continue;
      benchmark::RegisterBenchmark(
          (std::string(workloads[w].name) + "/mpi" + suffix).c_str(),
          [driver, w, ranks](benchmark::State& state) { driver->run(command{static_cast<int>(w), ranks}, &state); })
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
#endif
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
#ifdef SHARDWISE_BENCH_MPI
  return shardwise::bench::run_benchmarks(
      argc, argv, run_on_mpi, [](auto& driver, int world_size) { return register_all(&driver, world_size); });
#else
  return shardwise::bench::run_benchmarks(argc, argv, [] { return register_all<void>(nullptr, 1); });
#endif
}
