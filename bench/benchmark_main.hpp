#pragma once
// The main of every benchmark program: Google Benchmark's Initialize, registration, runs and Shutdown,
// and, for the MPI benchmarks, the protocol of mpi_orders.hpp around them (rank 0 runs Google Benchmark,
// the other ranks follow its orders). A program supplies only what it registers.
#include <benchmark/benchmark.h>

#include <cstdio>

#ifdef SHARDWISE_BENCH_MPI
#include "mpi_orders.hpp"
#include "shardwise/comm/mpi.hpp"
#endif

namespace shardwise::bench {

namespace detail {

// Rank 0's part (the whole program without MPI); `before_shutdown` lets the other MPI ranks go.
template <class Register, class BeforeShutdown>
int run_google_benchmark(int& argc, char** argv, Register& register_all, BeforeShutdown&& before_shutdown) {
  benchmark::Initialize(&argc, argv);
  const bool registered = register_all();
  if (registered) benchmark::RunSpecifiedBenchmarks();
  before_shutdown();
  benchmark::Shutdown();
  return registered ? 0 : 1;
}

}  // namespace detail

// Without MPI: `register_all()` registers the benchmarks and returns true, or false (having said why)
// when a correctness check failed, and then nothing runs. Returns main's exit code: 0, or 1 for a
// failed check. A program whose MPI variants are optional calls this one when built without MPI.
template <class Register>
int run_benchmarks(int argc, char** argv, Register&& register_all) {
  return detail::run_google_benchmark(argc, argv, register_all, [] {});
}

#ifdef SHARDWISE_BENCH_MPI
// What an MPI benchmark program needs beyond the protocol.
struct mpi_options {
  // With fewer ranks, every rank returns 2 and rank 0 says "<program> needs <n> MPI ranks: ...".
  int minimum_ranks = 1;
  const char* program = "benchmark";
  // Called on every rank once MPI runs (before the rank count is checked), and on every rank when its
  // part is over, while MPI still runs: e.g. a library that adopts MPI and must let go of it (BLACS).
  void (*on_start)() = nullptr;
  void (*on_finish)() = nullptr;
};

// The same under MPI (mpi_orders.hpp): rank 0 runs the benchmarks that `register_all(driver,
// world_size)` registers, where the MPI variants are `driver.run(order, &state)`; the other ranks carry
// out `part` of each order until rank 0 has run them all (or its check failed). Returns main's exit
// code: 0, 1 for a failed check (rank 0), 2 for too few ranks.
template <mpi_order Order, class Result, class Register>
int run_benchmarks(int argc, char** argv, Result (*part)(mpi::communicator&, const Order&, benchmark::State*),
                   Register&& register_all, const mpi_options& options = {}) {
  mpi::environment session(argc, argv);
  auto world = mpi::communicator::world();
  if (options.on_start != nullptr) options.on_start();
  if (world.size() < options.minimum_ranks) {
    if (world.rank() == 0)
      std::fprintf(stderr, "%s needs %d MPI ranks: mpiexec -n %d --oversubscribe\n", options.program,
                   options.minimum_ranks, options.minimum_ranks);
    return 2;
  }
  mpi_driver<Order, Result> driver(world, part);
  int status = 0;
  if (world.rank() == 0) {
    auto register_with_driver = [&] { return register_all(driver, world.size()); };
    status = detail::run_google_benchmark(argc, argv, register_with_driver, [&] { driver.stop(); });
  } else {
    driver.follow();
  }
  if (options.on_finish != nullptr) options.on_finish();
  return status;
}
#endif

}  // namespace shardwise::bench
