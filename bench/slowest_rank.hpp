#pragma once
// How the multi-rank benchmarks time one iteration: from the first rank leaving a barrier to the last
// rank finishing (steady_clock is one clock for every thread and process of this machine, and a rank
// descheduled before it starts its own clock would otherwise hide its delay). The two extremes are
// combined outside the measurement.
#include <benchmark/benchmark.h>

#include <array>
#include <chrono>

#include "shardwise/comm/communicator.hpp"

namespace shardwise::bench {

// One timed call of `operation` on every rank of `comm`; returns the seconds on every rank.
template <class Communicator, class Operation>
double slowest(Communicator& comm, Operation&& operation) {
  using clock = std::chrono::steady_clock;
  auto seconds_since_epoch = [] { return std::chrono::duration<double>(clock::now().time_since_epoch()).count(); };
  comm.barrier();
  const double start = seconds_since_epoch();
  operation();
  std::array<double, 2> extremes{seconds_since_epoch(), -start};  // max of both: last end, first start
  comm.all_reduce(extremes, op::max);
  return extremes[0] + extremes[1];
}

// The loop every participating rank runs: the rank given Google Benchmark's state (non-null on one
// rank only) reports each iteration, the others run the same number of iterations.
template <class Communicator, class Operation>
void measure(benchmark::State* state, long long iterations, Communicator& comm, Operation&& operation) {
  if (state == nullptr) {
    for (long long i = 0; i < iterations; ++i) slowest(comm, operation);
    return;
  }
  for (auto _ : *state) state->SetIterationTime(slowest(comm, operation));
}

}  // namespace shardwise::bench
