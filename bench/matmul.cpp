// bench/matmul: the float product C = A·B of two N x N matrices, N = 2048, on 8 MPI ranks, side by side
// in one run for
//   scalapack/grid:2x4    – ScaLAPACK's PSGEMM (Debian's libscalapack-openmpi) on a 2x4 BLACS grid of
//                           the 8 ranks, block-cyclic in 64 x 64 blocks (scalapack_block below);
//   scalapack/grid:2x2    – the same on a 2x2 grid of ranks 0-3, the other ranks asleep;
//   eigen/full            – one Eigen GEMM of the whole matrices on rank 0, the other ranks asleep;
//   shardwise_3d/mpi      – shardwise::matmul of cube_3d operands on a 2x2x2 process_mesh of the 8 ranks;
//   shardwise_3d/threads  – the same on 8 threads inside rank 0, the other ranks asleep.
// Built with SHARDWISE_USE_BLAS=ON, Eigen's products (eigen/full and the local products of the 3-D
// algorithm) and PSGEMM's local products all run in the same OpenBLAS; run it one thread per rank:
//   OPENBLAS_NUM_THREADS=1 mpiexec -n 8 --oversubscribe bench_matmul --benchmark_out=matmul.json
//       --benchmark_out_format=json                          (scripts/bench-matmul does exactly this)
// The counter FLOP is 2N³ / time, in FLOP per second. Each iteration's time is the slowest rank's from
// a common barrier (slowest_rank.hpp); the idle ranks wait asleep (mpi_orders.hpp). Operands are
// created once per repetition, outside the timed loop; the 3-D product's output is allocated inside it,
// as a user's is.
// Before any timing, each distributed result is compared once with eigen/full's: the maximum absolute
// difference goes into the JSON's context (max_abs_error/...), and any difference fails the run. The
// operands are small integers, so every order of summation gives the exact product in float.
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <Eigen/Core>
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "benchmark_main.hpp"
#include "mpi_orders.hpp"
#include "shardwise/comm/mpi.hpp"
#include "shardwise/comm/threads.hpp"
#include "shardwise/layout/cube_3d.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/ops/matmul.hpp"
#include "shardwise/tensor/distribute.hpp"
#include "shardwise/tensor/dtensor.hpp"
#include "slowest_rank.hpp"

// ScaLAPACK and its BLACS, as Debian's libscalapack-openmpi exports them (no header ships with it).
extern "C" {
void Cblacs_pinfo(int* rank, int* ranks);
int Csys2blacs_handle(MPI_Comm comm);
void Cfree_blacs_system_handle(int handle);
void Cblacs_gridinit(int* context, const char* order, int rows, int cols);
void Cblacs_gridinfo(int context, int* rows, int* cols, int* row, int* col);
void Cblacs_gridexit(int context);
void Cblacs_exit(int keep_mpi_running);
int numroc_(const int* extent, const int* block, const int* coordinate, const int* source, const int* grid_extent);
void descinit_(int* descriptor, const int* rows, const int* cols, const int* row_block, const int* col_block,
               const int* row_source, const int* col_source, const int* context, const int* leading_extent, int* info);
void psgemm_(const char* transpose_a, const char* transpose_b, const int* m, const int* n, const int* k,
             const float* alpha, const float* a, const int* a_row, const int* a_col, const int* a_descriptor,
             const float* b, const int* b_row, const int* b_col, const int* b_descriptor, const float* beta, float* c,
             const int* c_row, const int* c_col, const int* c_descriptor);
}

namespace {

using namespace shardwise;

constexpr int n = 2048;
constexpr double flops = 2.0 * n * n * n;

// Small integers: |C(i, j)| <= 2048 * 4 * 3 < 2^24, so every partial sum is exact in float.
float value_a(std::int64_t i, std::int64_t j) { return static_cast<float>((i * 3 + j * 5) % 9 - 4); }
float value_b(std::int64_t i, std::int64_t j) { return static_cast<float>((i * 7 + j * 2) % 7 - 3); }

using full_matrix = Eigen::MatrixXf;  // column-major, as BLAS and ScaLAPACK store matrices

full_matrix full_of(float (*value)(std::int64_t, std::int64_t)) {
  full_matrix whole(n, n);
  for (Eigen::Index j = 0; j < n; ++j)
    for (Eigen::Index i = 0; i < n; ++i) whole(i, j) = value(i, j);
  return whole;
}

// eigen/full's product, on rank 0: the reference of the correctness checks.
const full_matrix& reference() {
  static const full_matrix product = [] {
    full_matrix c(n, n);
    c.noalias() = full_of(value_a) * full_of(value_b);
    return c;
  }();
  return product;
}

// The counters every variant reports (rank 0): FLOP per second (shown as e.g. "FLOP=98.3G/s") and on
// how many ranks.
void report(benchmark::State& state, int ranks) {
  state.counters["FLOP"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["ranks"] = ranks;
}

enum class variant : int { scalapack, shardwise_mpi };

// What rank 0 tells the other ranks before each MPI measurement (mpi_orders.hpp); ranks = 0 ends the
// program. The grid is PSGEMM's; iterations = 0 asks for one untimed product and its check instead.
struct command {
  int what = 0;
  int ranks = 0;
  int grid_rows = 0;
  int grid_cols = 0;
  int block = 0;
  long long iterations = 0;
};

// A global matrix assembled on rank 0 of `group` from each rank's elements (the others send zeros
// elsewhere, so the sum is the matrix); empty on the other ranks.
full_matrix assemble(mpi::communicator& group, const full_matrix& mine) {
  full_matrix whole = group.rank() == 0 ? full_matrix(n, n) : full_matrix();
  const std::span<const float> in(mine.data(), static_cast<std::size_t>(mine.size()));
  group.reduce(in, std::span<float>(whole.data(), static_cast<std::size_t>(whole.size())), op::sum, 0);
  return whole;
}

// PSGEMM on a grid_rows x grid_cols BLACS grid of `group`'s ranks, square blocks. Returns, when
// checking, the product assembled on rank 0.
full_matrix run_scalapack(benchmark::State* state, const command& order, mpi::communicator& group) {
  const int blacs_handle = Csys2blacs_handle(group.native());
  int context = blacs_handle;
  Cblacs_gridinit(&context, "Row-major", order.grid_rows, order.grid_cols);
  int grid_rows = 0, grid_cols = 0, grid_row = 0, grid_col = 0;
  Cblacs_gridinfo(context, &grid_rows, &grid_cols, &grid_row, &grid_col);
  const int source = 0;
  const int local_rows = numroc_(&n, &order.block, &grid_row, &source, &grid_rows);
  const int local_cols = numroc_(&n, &order.block, &grid_col, &source, &grid_cols);
  const int leading_extent = std::max(1, local_rows);
  std::array<int, 9> descriptor{};
  int info = 0;
  descinit_(descriptor.data(), &n, &n, &order.block, &order.block, &source, &source, &context, &leading_extent, &info);
  if (info != 0) throw argument_error(group.world_rank(), "descinit_", "returned info " + std::to_string(info));

  // ScaLAPACK's INDXL2G: the global index of local index `local` along one block-cyclic dimension.
  const auto global = [&](Eigen::Index local, int coordinate, int grid_extent) {
    return (local / order.block * grid_extent + coordinate) * order.block + local % order.block;
  };
  full_matrix a(local_rows, local_cols), b(local_rows, local_cols), c(local_rows, local_cols);
  for (Eigen::Index j = 0; j < local_cols; ++j)
    for (Eigen::Index i = 0; i < local_rows; ++i) {
      a(i, j) = value_a(global(i, grid_row, grid_rows), global(j, grid_col, grid_cols));
      b(i, j) = value_b(global(i, grid_row, grid_rows), global(j, grid_col, grid_cols));
    }
  const int one = 1;
  const float alpha = 1.0F, beta = 0.0F;
  const auto product = [&] {
    psgemm_("N", "N", &n, &n, &n, &alpha, a.data(), &one, &one, descriptor.data(), b.data(), &one, &one,
            descriptor.data(), &beta, c.data(), &one, &one, descriptor.data());
  };

  full_matrix checked;
  if (order.iterations == 0) {
    product();
    full_matrix mine = full_matrix::Zero(n, n);
    for (Eigen::Index j = 0; j < local_cols; ++j)
      for (Eigen::Index i = 0; i < local_rows; ++i)
        mine(global(i, grid_row, grid_rows), global(j, grid_col, grid_cols)) = c(i, j);
    checked = assemble(group, mine);
  } else {
    bench::measure(state, order.iterations, group, product);
  }
  Cblacs_gridexit(context);
  Cfree_blacs_system_handle(blacs_handle);
  return checked;
}

// shardwise's 3-D product on a 2x2x2 mesh of `world` (MPI ranks or threads). Returns, when checking
// (iterations = 0), the product gathered on rank 0.
template <class Communicator>
Eigen::MatrixXf run_shardwise(benchmark::State* state, long long iterations, Communicator& world) {
  process_mesh mesh(world, {2, 2, 2});
  const auto a = from_function<cube_3d<>::input>(mesh, {n, n}, value_a);
  const auto b = from_function<cube_3d<>::weight>(mesh, {n, n}, value_b);
  if (iterations == 0) return gather(shardwise::matmul(a, b), 0);
  bench::measure(state, iterations, world, [&] { benchmark::DoNotOptimize(shardwise::matmul(a, b)); });
  return {};
}

full_matrix run_mpi_variant(mpi::communicator& group, const command& order, benchmark::State* state) {
  if (static_cast<variant>(order.what) == variant::scalapack) return run_scalapack(state, order, group);
  return run_shardwise(state, order.iterations, group);
}

using order_driver = bench::mpi_driver<command, full_matrix>;

void benchmark_mpi(benchmark::State& state, order_driver* driver, command order) {
  order.iterations = static_cast<long long>(state.max_iterations);
  driver->run(order, &state);
  report(state, order.ranks);
}

void benchmark_shardwise_threads(benchmark::State& state) {
  const auto iterations = static_cast<long long>(state.max_iterations);
  threads::run(
      8, [&](threads::communicator& comm) { run_shardwise(comm.rank() == 0 ? &state : nullptr, iterations, comm); });
  report(state, 8);
}

void benchmark_eigen(benchmark::State& state) {
  const full_matrix a = full_of(value_a), b = full_of(value_b);
  full_matrix c(n, n);
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    c.noalias() = a * b;
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  benchmark::DoNotOptimize(c.data());
  report(state, 1);
}

// The MPI variants measured, as the orders that run them. PSGEMM's block size: 32, 64, 128 and 256
// tried side by side in one run on this (loaded) machine: 64 and 128 were fastest and within 10 % of
// each other (64 ahead on 2x2, 128 on 2x4), 32 and 256 up to 30 % slower on 2x4.
constexpr int scalapack_block = 64;
struct mpi_variant {
  const char* name;
  command order;
};
const std::array mpi_variants = {
    mpi_variant{"scalapack/grid:2x4", {static_cast<int>(variant::scalapack), 8, 2, 4, scalapack_block, 0}},
    mpi_variant{"scalapack/grid:2x2", {static_cast<int>(variant::scalapack), 4, 2, 2, scalapack_block, 0}},
    mpi_variant{"shardwise_3d/mpi", {static_cast<int>(variant::shardwise_mpi), 8, 0, 0, 0, 0}},
};

// Runs every distributed variant once and compares its product with eigen/full's; true when all agree.
bool check_against_reference(order_driver& driver) {
  bool all_exact = true;
  const auto record = [&](const std::string& name, const Eigen::MatrixXf& product) {
    const float error = (product - reference()).cwiseAbs().maxCoeff();
    benchmark::AddCustomContext("max_abs_error/" + name, std::to_string(error));
    if (error != 0.0F) {
      std::fprintf(stderr, "bench_matmul: %s differs from the Eigen product by up to %g\n", name.c_str(), error);
      all_exact = false;
    }
  };
  for (const auto& [name, order] : mpi_variants) record(name, driver.run(order, nullptr));
  Eigen::MatrixXf threads_product;
  threads::run(8, [&](threads::communicator& comm) {
    auto product = run_shardwise(nullptr, 0, comm);
    if (comm.rank() == 0) threads_product = std::move(product);
  });
  record("shardwise_3d/threads", threads_product);
  return all_exact;
}

// Rank 0: the context and the check, then, if every product matched, the benchmarks; false if not.
bool check_and_register(order_driver& driver, int /*world_size*/) {
  if (std::getenv("OPENBLAS_NUM_THREADS") == nullptr)
    std::fprintf(stderr,
                 "bench_matmul: OPENBLAS_NUM_THREADS is not set; OpenBLAS may start a thread per core in "
                 "every rank\n");
#ifdef EIGEN_USE_BLAS
  benchmark::AddCustomContext("eigen_products", "BLAS (EIGEN_USE_BLAS)");
#else
  benchmark::AddCustomContext("eigen_products", "Eigen's own");
#endif
  if (!check_against_reference(driver)) return false;
  // Few iterations, more repetitions: one product takes 0.1–1 s on this oversubscribed machine, and a
  // median over repetitions resists a noisy neighbour better than a longer single run.
  const auto configure = [](benchmark::internal::Benchmark* benchmark) {
    benchmark->Iterations(3)->Repetitions(5)->ReportAggregatesOnly(true)->UseManualTime()->Unit(
        benchmark::kMillisecond);
  };
  for (const auto& [name, order] : mpi_variants)
    configure(benchmark::RegisterBenchmark(name, benchmark_mpi, &driver, order));
  configure(benchmark::RegisterBenchmark("eigen/full", benchmark_eigen));
  configure(benchmark::RegisterBenchmark("shardwise_3d/threads", benchmark_shardwise_threads));
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  // BLACS adopts the running MPI on every rank, and must let go of it before MPI ends.
  const bench::mpi_options options{.minimum_ranks = 8,
                                   .program = "bench_matmul",
                                   .on_start =
                                       [] {
                                         int blacs_rank = 0, blacs_ranks = 0;
                                         Cblacs_pinfo(&blacs_rank, &blacs_ranks);
                                       },
                                   .on_finish = [] { Cblacs_exit(1); }};
  return bench::run_benchmarks(argc, argv, run_mpi_variant, check_and_register, options);
}
