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

#include "shardwise/optim/adam.hpp"
#include "shardwise/optim/sgd.hpp"
#include "shardwise/optim/sharded.hpp"
#include "workloads.hpp"

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

template <class Update, const shape_list& shapes>
constexpr shardwise::bench::workload make_workload(const char* name, std::array<int, 2> rank_counts) {
  constexpr auto steps = [](auto& comm, benchmark::State* state) { run_steps<Update, shapes>(comm, state); };
  return shardwise::bench::measured<decltype(steps)>(name, rank_counts, true);
}

const std::array workloads = {
    make_workload<optim::sharded_update<optim::adam>, model>("weight_update/sharded", {2, 8}),
    make_workload<optim::replicated_update<optim::adam>, model>("weight_update/replicated", {2, 8}),
    make_workload<optim::sharded_update<optim::sgd>, many_small>("batching/1000_tensors", {8, 0}),
    make_workload<optim::sharded_update<optim::sgd>, concatenated>("batching/concatenated", {8, 0}),
};

}  // namespace

int main(int argc, char** argv) { return shardwise::bench::run_workloads<workloads>(argc, argv); }
