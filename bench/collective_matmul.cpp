// bench/collective_matmul: collective matmul beside its unfused form, side by side in one run, float:
//   gather/ring        all_gather_matmul(x, w): X 2048 x 1024 rows cut (col_1d), W 1024 x 1024 columns cut
//   gather/unfused     all_gather_matmul(x, w, collective_matmul_form::unfused): X gathered whole, then matmul
//   scatter/ring       matmul_reduce_scatter(h, v): H 2048 x 1024 columns cut, V 1024 x 1024 rows cut
//   scatter/unfused    matmul_reduce_scatter(h, v, collective_matmul_form::unfused): matmul, then the
//                      sum reduce-scattered into rows cut
//   gather/collective_alone, scatter/collective_alone   the all_gather of X, the reduce_scatter of the
//                      sum (the communicator's collectives into buffers of the result's layout), without
//                      the products: the most that overlapping could hide
//   cube/chunks:1      the 3-D C = A·B of 1024 x 1024 matrices on balanced_shape<3>(P), as matmul does by default
//   cube/chunks:4      the same pipelined in 4 bands of rows (matmul_options::chunks)
// each at P = 2 and 4 on
//   threads – P threads of this process (under mpiexec: inside rank 0, the other ranks asleep),
//   mpi     – the first P MPI ranks (built with MPI and run under mpiexec -n 4; the others asleep).
//   bench_collective_matmul --benchmark_out=collective_matmul.json --benchmark_out_format=json
//   OPENBLAS_NUM_THREADS=1 mpiexec -n 4 --oversubscribe bench_collective_matmul ...   (adds the mpi rows)
// Each iteration's time is the slowest rank's from a common barrier (slowest_rank.hpp); the JSON has
// the median of 5 repetitions of 3 iterations. Before any timing every product, on 4
// threads, is compared with the serial Eigen product of the whole matrices: the operands are small
// integers, so every order of summation gives the exact product in float, and any difference fails
// the run.
#include <benchmark/benchmark.h>

#include <Eigen/Core>
#include <array>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>

#include "benchmark_main.hpp"
#include "shardwise/comm/threads.hpp"
#include "shardwise/layout/cube_3d.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/ops/collective_matmul.hpp"
#include "shardwise/ops/matmul.hpp"
#include "shardwise/tensor/distribute.hpp"
#include "shardwise/tensor/dtensor.hpp"
#include "slowest_rank.hpp"
#ifdef SHARDWISE_BENCH_MPI
#include "mpi_orders.hpp"
#include "shardwise/comm/mpi.hpp"
#endif

namespace {

using namespace shardwise;

constexpr std::int64_t tokens = 2048;  // M: the rows sequence parallelism cuts
constexpr std::int64_t width = 1024;   // K and N of the 1-D products
constexpr std::int64_t cube_n = 1024;  // the 3-D product is cube_n x cube_n x cube_n

// Small integers: every partial sum is below 2^24, so exact in float.
float value_a(std::int64_t i, std::int64_t j) { return static_cast<float>((i * 3 + j * 5) % 9 - 4); }
float value_b(std::int64_t i, std::int64_t j) { return static_cast<float>((i * 7 + j * 2) % 7 - 3); }

enum class product : int {
  gather_ring,
  gather_unfused,
  gather_alone,
  scatter_ring,
  scatter_unfused,
  scatter_alone,
  cube
};

struct variant {
  const char* name;
  product what;
  int chunks;
};
const std::array variants = {
    variant{"gather/ring", product::gather_ring, 1},
    variant{"gather/unfused", product::gather_unfused, 1},
    variant{"gather/collective_alone", product::gather_alone, 1},
    variant{"scatter/ring", product::scatter_ring, 1},
    variant{"scatter/unfused", product::scatter_unfused, 1},
    variant{"scatter/collective_alone", product::scatter_alone, 1},
    variant{"cube/chunks:1", product::cube, 1},
    variant{"cube/chunks:4", product::cube, 4},
};
bool multiplies(const variant& v) { return v.what != product::gather_alone && v.what != product::scatter_alone; }
collective_matmul_form form_of(const variant& v) {
  return v.what == product::gather_unfused || v.what == product::scatter_unfused ? collective_matmul_form::unfused
                                                                                 : collective_matmul_form::ring;
}
constexpr std::array rank_counts = {2, 4};

using whole_matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

whole_matrix whole(std::int64_t rows, std::int64_t cols, float (*value)(std::int64_t, std::int64_t)) {
  whole_matrix m(rows, cols);
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) m(i, j) = value(i, j);
  return m;
}

// Times `iterations` calls of `multiply` (Google Benchmark's state on rank 0 only), or, with iterations
// = 0, returns its product gathered on rank 0.
template <class Communicator, class Multiply>
whole_matrix time_or_check(benchmark::State* state, long long iterations, Communicator& world, Multiply&& multiply) {
  if (iterations == 0) return gather(multiply(), 0);
  bench::measure(state, iterations, world, [&] { benchmark::DoNotOptimize(multiply()); });
  return {};
}

// One rank's part of variant `v` on the ranks of `world`.
template <class Communicator>
whole_matrix run_variant(benchmark::State* state, long long iterations, const variant& v, Communicator& world) {
  if (v.what == product::cube) {
    process_mesh mesh(world, balanced_shape<3>(world.size()));
    const auto a = from_function<cube_3d<>::input>(mesh, {cube_n, cube_n}, value_a);
    const auto b = from_function<cube_3d<>::weight>(mesh, {cube_n, cube_n}, value_b);
    return time_or_check(state, iterations, world, [&] { return matmul(a, b, {.chunks = v.chunks}); });
  }
  process_mesh mesh(world, {world.size()});
  using Mesh = decltype(mesh);
  auto& line = mesh.axis(0);
  if (v.what == product::gather_ring || v.what == product::gather_unfused || v.what == product::gather_alone) {
    const auto x = from_function<col_1d<>>(mesh, {tokens, width}, value_a);
    const auto w = from_function<row_1d<>>(mesh, {width, width}, value_b);
    const auto gather_x = [&] {
      dtensor<float, replicated<>, Mesh> gathered(mesh, x.extents());
      line.all_gather(x.data(), gathered.data());
      return gathered;
    };
    if (v.what == product::gather_alone) return time_or_check(state, iterations, world, gather_x);
    return time_or_check(state, iterations, world, [&] { return all_gather_matmul(x, w, form_of(v)); });
  }
  const auto h = from_function<row_1d<>>(mesh, {tokens, width}, value_a);
  const auto v_rows = from_function<col_1d<>>(mesh, {width, width}, value_b);
  const auto scatter = [&](const auto& addends) {
    dtensor<float, col_1d<>, Mesh> sums(mesh, addends.extents());
    line.reduce_scatter(addends.data(), sums.data());
    return sums;
  };
  if (v.what == product::scatter_alone) {
    const auto addends = matmul(h, v_rows);
    return time_or_check(state, iterations, world, [&] { return scatter(addends); });
  }
  return time_or_check(state, iterations, world, [&] { return matmul_reduce_scatter(h, v_rows, form_of(v)); });
}

void report(benchmark::State& state, const variant& v, int ranks) {
  const double flops = v.what == product::cube ? 2.0 * cube_n * cube_n * cube_n : 2.0 * tokens * width * width;
  if (multiplies(v)) state.counters["FLOP"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["ranks"] = ranks;
}

void benchmark_threads(benchmark::State& state, const variant* v, int ranks) {
  const auto iterations = static_cast<long long>(state.max_iterations);
  threads::run(ranks, [&](threads::communicator& comm) {
    run_variant(comm.rank() == 0 ? &state : nullptr, iterations, *v, comm);
  });
  report(state, *v, ranks);
}

// Every variant on 4 threads against serial Eigen; true when all are exact.
bool check_against_serial() {
  const whole_matrix gather_expected = whole(tokens, width, value_a) * whole(width, width, value_b);
  const whole_matrix cube_expected = whole(cube_n, cube_n, value_a) * whole(cube_n, cube_n, value_b);
  bool all_exact = true;
  for (const variant& v : variants) {
    if (!multiplies(v)) continue;
    whole_matrix product;
    threads::run(4, [&](threads::communicator& comm) {
      auto mine = run_variant(nullptr, 0, v, comm);
      if (comm.rank() == 0) product = std::move(mine);
    });
    const whole_matrix& expected = v.what == product::cube ? cube_expected : gather_expected;
    const float error = (product - expected).cwiseAbs().maxCoeff();
    benchmark::AddCustomContext(std::string("max_abs_error/") + v.name, std::to_string(error));
    if (error != 0.0F) {
      std::fprintf(stderr, "bench_collective_matmul: %s differs from the Eigen product by up to %g\n", v.name, error);
      all_exact = false;
    }
  }
  return all_exact;
}

void configure(benchmark::internal::Benchmark* b) {
  b->Iterations(3)->Repetitions(5)->ReportAggregatesOnly(true)->UseManualTime()->Unit(benchmark::kMillisecond);
}

#ifdef SHARDWISE_BENCH_MPI
// What rank 0 tells the others before each MPI measurement (mpi_orders.hpp); ranks = 0 ends the program.
struct command {
  int variant = 0;
  int ranks = 0;
  long long iterations = 0;
};

void run_on_mpi(mpi::communicator& part, const command& order, benchmark::State* state) {
  run_variant(state, order.iterations, variants[static_cast<std::size_t>(order.variant)], part);
}
#endif

// Every variant at each rank count on threads and, built with MPI, on the world's first ranks where it
// has enough (`driver` is null without MPI), once every product has matched Eigen's (false if not).
template <class Driver>
bool check_and_register([[maybe_unused]] Driver* driver, [[maybe_unused]] int world_size) {
  if (!check_against_serial()) return false;
  for (std::size_t i = 0; i < variants.size(); ++i) {
    for (const int ranks : rank_counts) {
      const std::string suffix = "/" + std::to_string(ranks);
      configure(benchmark::RegisterBenchmark((std::string(variants[i].name) + "/threads" + suffix).c_str(),
                                             benchmark_threads, &variants[i], ranks));
#ifdef SHARDWISE_BENCH_MPI
      if (ranks > world_size) continue;
      configure(benchmark::RegisterBenchmark(
          (std::string(variants[i].name) + "/mpi" + suffix).c_str(), [driver, i, ranks](benchmark::State& state) {
            driver->run(command{static_cast<int>(i), ranks, static_cast<long long>(state.max_iterations)}, &state);
            report(state, variants[i], ranks);
          }));
#endif
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
#ifdef SHARDWISE_BENCH_MPI
  return bench::run_benchmarks(argc, argv, run_on_mpi,
                               [](auto& driver, int world_size) { return check_and_register(&driver, world_size); });
#else
  return bench::run_benchmarks(argc, argv, [] { return check_and_register<void>(nullptr, 1); });
#endif
}
