#pragma once
// Benchmark programs whose measurements run alike on threads and on MPI ranks (bench_transformer,
// bench_weight_update): each workload at each of its rank counts P registers as <name>/threads (P
// threads of this process; under mpiexec inside rank 0 while the others wait) and, built with MPI and
// run under mpiexec with at least P ranks, <name>/mpi (the world's first P ranks, benchmark_main.hpp),
// each followed by /P where the name does not already say P. Times are manual, in milliseconds.
#include <benchmark/benchmark.h>

#include <array>
#include <cstddef>
#include <string>

#include "benchmark_main.hpp"
#include "shardwise/comm/threads.hpp"
#ifdef SHARDWISE_BENCH_MPI
#include "shardwise/comm/mpi.hpp"
#endif

namespace shardwise::bench {

struct workload {
  const char* name;
  void (*on_threads)(int ranks, benchmark::State& state);
#ifdef SHARDWISE_BENCH_MPI
  void (*on_mpi)(mpi::communicator& part, benchmark::State* state);  // state: on rank 0 only
#endif
  std::array<int, 2> rank_counts;  // 0: unused
  bool ranks_in_name;              // <name>/threads/P, or <name>/threads where the name says P already
};

// A workload whose every rank runs `Steps{}(comm, state)` (a captureless callable over either backend's
// communicator; `state` on the reporting rank only).
template <class Steps>
constexpr workload measured(const char* name, std::array<int, 2> rank_counts, bool ranks_in_name) {
  return {name,
          [](int ranks, benchmark::State& state) {
            threads::run(ranks,
                         [&](threads::communicator& comm) { Steps{}(comm, comm.rank() == 0 ? &state : nullptr); });
          },
#ifdef SHARDWISE_BENCH_MPI
          [](mpi::communicator& part, benchmark::State* state) { Steps{}(part, state); },
#endif
          rank_counts, ranks_in_name};
}

namespace detail {

#ifdef SHARDWISE_BENCH_MPI
// What rank 0 tells the others before each MPI measurement (mpi_orders.hpp); ranks = 0 ends the program.
struct workload_order {
  int workload = 0;
  int ranks = 0;
};

template <const auto& workloads>
void run_workload_on_mpi(mpi::communicator& part, const workload_order& order, benchmark::State* state) {
  workloads[static_cast<std::size_t>(order.workload)].on_mpi(part, state);
}
#endif

// `driver`: null without MPI.
template <const auto& workloads, class Driver>
bool register_workloads([[maybe_unused]] Driver* driver, [[maybe_unused]] int world_size) {
  for (std::size_t w = 0; w < workloads.size(); ++w)
    for (const int ranks : workloads[w].rank_counts) {
      if (ranks == 0) continue;
      const std::string suffix = workloads[w].ranks_in_name ? "/" + std::to_string(ranks) : "";
      benchmark::RegisterBenchmark((std::string(workloads[w].name) + "/threads" + suffix).c_str(),
                                   [w, ranks](benchmark::State& state) { workloads[w].on_threads(ranks, state); })
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
#ifdef SHARDWISE_BENCH_MPI
      if (ranks > world_size) continue;
      benchmark::RegisterBenchmark((std::string(workloads[w].name) + "/mpi" + suffix).c_str(),
                                   [driver, w, ranks](benchmark::State& state) {
                                     driver->run(workload_order{static_cast<int>(w), ranks}, &state);
                                   })
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
#endif
    }
  return true;
}

}  // namespace detail

// main() of a program that measures `workloads` (an array of workload with static storage).
template <const auto& workloads>
int run_workloads(int argc, char** argv) {
#ifdef SHARDWISE_BENCH_MPI
  return run_benchmarks(argc, argv, detail::run_workload_on_mpi<workloads>, [](auto& driver, int world_size) {
    return detail::register_workloads<workloads>(&driver, world_size);
  });
#else
  return run_benchmarks(argc, argv, [] { return detail::register_workloads<workloads, void>(nullptr, 1); });
#endif
}

}  // namespace shardwise::bench
