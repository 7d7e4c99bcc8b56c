// bench/collectives: all_reduce, reduce_scatter, all_gather and all_to_all from 4 KiB to 64 MiB at
// P = 2 and P = 8, side by side in one run for
//   threads  – shardwise::threads, P threads inside MPI rank 0 (the other MPI ranks sleep meanwhile),
//   mpi      – shardwise::mpi over P MPI processes,
//   raw_mpi  – the same MPI calls made directly (MPI_Allreduce, MPI_Reduce_scatter_block, …),
//   copy     – the copy bound: P threads each copying one full buffer (memcpy), no communication.
// Launch: mpiexec -n 8 --oversubscribe bench_collectives --benchmark_out=collectives.json
//                 --benchmark_out_format=json        (scripts/bench-collectives does exactly this)
// Bandwidth is algorithm bandwidth: bytes of the full buffer / time. "Full buffer" is each rank's
// input and output for all_reduce and all_to_all, the input for reduce_scatter, the output for
// all_gather. Each iteration's time is the slowest rank's, measured from a common barrier.
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "benchmark_main.hpp"
#include "mpi_orders.hpp"
#include "shardwise/comm/mpi.hpp"
#include "shardwise/comm/threads.hpp"
#include "slowest_rank.hpp"

namespace {

using namespace shardwise;

enum class collective : int { all_reduce, reduce_scatter, all_gather, all_to_all };
enum class variant : int { threads, mpi, raw_mpi, copy };

constexpr std::array collectives_measured = {collective::all_reduce, collective::reduce_scatter, collective::all_gather,
                                             collective::all_to_all};
constexpr std::array<const char*, 4> collective_names = {"all_reduce", "reduce_scatter", "all_gather", "all_to_all"};
constexpr std::array<const char*, 4> variant_names = {"threads", "mpi", "raw_mpi", "copy"};

// What rank 0 tells the other MPI ranks before each MPI benchmark (see mpi_orders.hpp); ranks = 0
// ends the program.
struct command {
  int what = 0;
  int ranks = 0;
  long long bytes = 0;
  long long iterations = 0;
  int use_shardwise = 0;
};

std::size_t elements_of(long long bytes) { return static_cast<std::size_t>(bytes) / sizeof(float); }

// Buffers for one rank: sized so that `bytes` is the full buffer of the collective (see above).
struct buffers {
  buffers(collective what, std::size_t full, std::size_t ranks) {
    const std::size_t in_size = what == collective::all_gather ? full / ranks : full;
    const std::size_t out_size = what == collective::reduce_scatter ? full / ranks : full;
    in.assign(in_size, 1.0F);
    out.assign(out_size, 0.0F);
  }
  std::vector<float> in;
  std::vector<float> out;
};

template <class Communicator>
void call(Communicator& comm, collective what, buffers& data) {
  switch (what) {
    case collective::all_reduce: comm.all_reduce(data.in, data.out, op::sum); break;
    case collective::reduce_scatter: comm.reduce_scatter(data.in, data.out, op::sum); break;
    case collective::all_gather: comm.all_gather(data.in, data.out); break;
    case collective::all_to_all: comm.all_to_all(data.in, data.out); break;
  }
}

void call_raw(MPI_Comm comm, collective what, buffers& data) {
  const int ranks = [&] {
    int size = 0;
    MPI_Comm_size(comm, &size);
    return size;
  }();
  switch (what) {
    case collective::all_reduce:
      MPI_Allreduce(data.in.data(), data.out.data(), static_cast<int>(data.in.size()), MPI_FLOAT, MPI_SUM, comm);
      break;
    case collective::reduce_scatter:
      MPI_Reduce_scatter_block(data.in.data(), data.out.data(), static_cast<int>(data.out.size()), MPI_FLOAT, MPI_SUM,
                               comm);
      break;
    case collective::all_gather:
      MPI_Allgather(data.in.data(), static_cast<int>(data.in.size()), MPI_FLOAT, data.out.data(),
                    static_cast<int>(data.in.size()), MPI_FLOAT, comm);
      break;
    case collective::all_to_all: {
      const int block = static_cast<int>(data.in.size()) / ranks;
      MPI_Alltoall(data.in.data(), block, MPI_FLOAT, data.out.data(), block, MPI_FLOAT, comm);
      break;
    }
  }
}

using shardwise::bench::measure;

void run_mpi_variant(mpi::communicator& group, const command& order, benchmark::State* state) {
  const auto what = static_cast<collective>(order.what);
  buffers data(what, elements_of(order.bytes), static_cast<std::size_t>(order.ranks));
  if (order.use_shardwise) {
    measure(state, order.iterations, group, [&] { call(group, what, data); });
  } else {
    measure(state, order.iterations, group, [&] { call_raw(group.native(), what, data); });
  }
}

using order_driver = bench::mpi_driver<command, void>;

void benchmark_collective(benchmark::State& state, order_driver* driver, variant how, collective what, int ranks) {
  const long long bytes = state.range(0);
  const long long iterations = static_cast<long long>(state.max_iterations);
  if (how == variant::threads || how == variant::copy) {
    threads::run(ranks, [&](threads::communicator& comm) {
      benchmark::State* reporter = comm.rank() == 0 ? &state : nullptr;
      if (how == variant::copy) {
        std::vector<float> from(elements_of(bytes), 1.0F), to(elements_of(bytes), 0.0F);
        measure(reporter, iterations, comm, [&] { std::memcpy(to.data(), from.data(), from.size() * sizeof(float)); });
      } else {
        buffers data(what, elements_of(bytes), static_cast<std::size_t>(ranks));
        measure(reporter, iterations, comm, [&] { call(comm, what, data); });
      }
    });
  } else {
    driver->run({static_cast<int>(what), ranks, bytes, iterations, how == variant::mpi ? 1 : 0}, &state);
  }
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["ranks"] = ranks;
}

constexpr long long kib = 1024;
constexpr long long smallest = 4 * kib;
constexpr long long largest = 64 * kib * kib;

// Enough iterations for a stable median at small sizes, few at 64 MiB (where one call takes up to a
// few hundred milliseconds at P = 8 on two cores), and more repetitions there: on an oversubscribed
// machine single medians of large calls move by 20 % from run to run.
long long iterations_for(long long bytes) { return std::clamp<long long>((256 * kib * kib) / bytes / 4, 3, 2000); }
int repetitions_for(long long bytes) { return bytes >= 16 * kib * kib ? 11 : 5; }

bool register_all(order_driver& driver, int /*world_size*/) {
  auto add = [&](const std::string& name, variant how, collective what, int ranks) {
    for (long long bytes = smallest; bytes <= largest; bytes *= 4)
      benchmark::RegisterBenchmark(name.c_str(), benchmark_collective, &driver, how, what, ranks)
          ->Arg(bytes)
          ->Iterations(iterations_for(bytes))
          ->Repetitions(repetitions_for(bytes))
          ->ReportAggregatesOnly(true)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
  };
  for (const int ranks : {2, 8}) {
    const std::string suffix = "/P:" + std::to_string(ranks);
    for (const collective what : collectives_measured)
      for (const variant how : {variant::threads, variant::mpi, variant::raw_mpi})
        add(std::string(collective_names[static_cast<std::size_t>(what)]) + "/" +
                variant_names[static_cast<std::size_t>(how)] + suffix,
            how, what, ranks);
    add("copy_bound/copy" + suffix, variant::copy, collective::all_gather, ranks);  // `what` unused by copy
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  return bench::run_benchmarks(argc, argv, run_mpi_variant, register_all,
                               {.minimum_ranks = 8, .program = "bench_collectives"});
}
