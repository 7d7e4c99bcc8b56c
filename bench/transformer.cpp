// bench/transformer: forward and backward of one Transformer block (nn/transformer_block.hpp) in the
// 1-D, 2-D and 3-D tensor-parallel families at equal P, side by side — the shape of the 3-D paper's
// Table 2 (forward time, backward time, step time), plus the bytes each rank moved per step.
//   1-D/4, 2-D/4 (2x2), 3-D/4 (1x2x2)     equal P = 4
//   1-D/8, 3-D/8 (2x2x2)                  P = 8 (2-D needs a square grid)
// One block: width 512, 8 heads, sequences of 64, batches of 8 sequences (512 rows), MLP width 2048,
// float. On the threads backend (P threads of this process; under mpiexec inside rank 0 while the
// other ranks sleep) and, run under `mpiexec -n 8 --oversubscribe`, on P MPI ranks.
//   bench_transformer --benchmark_out=transformer.json --benchmark_out_format=json
// Each iteration's time is forward + backward, each timed from a common barrier to the slowest rank's
// end (slowest_rank.hpp). Counters: forward_ms and backward_ms (means over the iterations), and
// sent_bytes_per_rank: what rank 0 sent on the mesh axes during one step (comm/traffic.hpp).
#include <benchmark/benchmark.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>

#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/nn/transformer_block.hpp"
#include "slowest_rank.hpp"
#include "workloads.hpp"

namespace {

namespace nn = shardwise::nn;

constexpr nn::block_options options{.hidden = 512, .heads = 8, .sequence = 64, .expansion = 4, .causal = true};
constexpr std::int64_t batch = 8;

// One rank's part: build the block and its data, then run steps while rank 0 (state non-null) asks
// for another.
template <class Family, std::size_t D>
void run_steps(shardwise::communicator auto& comm, const shardwise::coordinates<D>& grid, benchmark::State* state) {
  shardwise::process_mesh mesh(comm, grid);
  using mesh_type = decltype(mesh);
  nn::transformer_block<float, Family, mesh_type> block(mesh, options, 1);
  const shardwise::matrix_extents extents{batch * options.sequence, options.hidden};
  const auto x = shardwise::from_function<typename Family::input>(
      mesh, extents, [](std::int64_t i, std::int64_t j) { return std::sin(0.01f * float(i) + 0.1f * float(j)); });
  const auto dy = shardwise::from_function<typename Family::input>(
      mesh, extents, [](std::int64_t i, std::int64_t j) { return std::cos(0.02f * float(i) - 0.1f * float(j)); });

  double forward_seconds = 0;
  double backward_seconds = 0;
  std::int64_t sent = 0;
  int another = 1;
  const auto step = [&] {
    comm.broadcast(std::span<int>(&another, 1), 0);
    if (another == 0) return false;
    const auto before = mesh.traffic();
    forward_seconds += shardwise::bench::slowest(comm, [&] { (void)block.forward(x); });
    backward_seconds += shardwise::bench::slowest(comm, [&] { (void)block.backward(dy); });
    const auto moved = mesh.traffic() - before;
    sent = 0;
    for (const auto& axis : moved.axes) sent += axis.bytes_sent;
    return true;
  };
  if (state == nullptr) {
    while (step()) {
    }
    return;
  }
  for (auto _ : *state) {
    const double forward_before = forward_seconds;
    const double backward_before = backward_seconds;
    step();
    state->SetIterationTime(forward_seconds - forward_before + backward_seconds - backward_before);
  }
  another = 0;
  step();
  const auto iterations = static_cast<double>(state->iterations());
  state->counters["forward_ms"] = 1e3 * forward_seconds / iterations;
  state->counters["backward_ms"] = 1e3 * backward_seconds / iterations;
  state->counters["sent_bytes_per_rank"] = static_cast<double>(sent);
  state->counters["ranks"] = comm.size();
}

template <class Family, std::size_t D, shardwise::coordinates<D> Grid>
constexpr shardwise::bench::workload make_workload(const char* name) {
  constexpr auto steps = [](auto& comm, benchmark::State* state) { run_steps<Family>(comm, Grid, state); };
  return shardwise::bench::measured<decltype(steps)>(name, {shardwise::grid_size(Grid), 0}, false);
}

const std::array workloads = {
    make_workload<nn::tensor_parallel_1d<>, 1, shardwise::coordinates<1>{4}>("transformer_block/1d/4"),
    make_workload<nn::tensor_parallel_2d<>, 2, shardwise::coordinates<2>{2, 2}>("transformer_block/2d/4"),
    make_workload<nn::tensor_parallel_3d<>, 3, shardwise::coordinates<3>{1, 2, 2}>("transformer_block/3d/4"),
    make_workload<nn::tensor_parallel_1d<>, 1, shardwise::coordinates<1>{8}>("transformer_block/1d/8"),
    make_workload<nn::tensor_parallel_3d<>, 3, shardwise::coordinates<3>{2, 2, 2}>("transformer_block/3d/8"),
};

}  // namespace

int main(int argc, char** argv) { return shardwise::bench::run_workloads<workloads>(argc, argv); }
