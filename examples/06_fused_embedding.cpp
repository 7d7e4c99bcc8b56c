// Tutorial 06: the fused embedding-bag + all-to-all (docs/fused.md).
//
// DLRM keeps its embedding tables split table-wise over the GPUs, but its MLP wants the batch split:
// each GPU pools every bag of the global batch for its own tables, and an all-to-all hands each GPU
// its rows of every table. Fusing the two sends each slice of pooled rows as soon as it is done.
//
// Part 1 runs on the ranks this program was launched with (8 threads, or mpiexec): the operator, its
// output checked against the baseline. Part 2, on the first of those ranks, runs the same operator on
// 2 simulated MI210s in two nodes joined by InfiniBand and writes the timeline
// (fused_embedding_trace.json, open it in ui.perfetto.dev: a track per workgroup shows remote slices
// computed first, the NIC track shows the slices leaving while the local ones are still being pooled).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "launch.hpp"
#include "shardwise/core/shared_buffer.hpp"
#include "shardwise/fused/embedding_all_to_all.hpp"
#include "shardwise/sim/presets.hpp"
#include "shardwise/sim/sim_gpu.hpp"

namespace {

using namespace shardwise;

// Every rank's tables (rows × dimension, row-major) and bags, as PyTorch's EmbeddingBag takes them.
// The tables start on a cache line, as the library's embedding layer keeps them (shared_buffer): in a
// std::vector a large table starts 16 bytes past one, and every row then reads a line more
// (docs/fused.md, "Tables on a cache line").
struct inputs {
  std::vector<shared_buffer<float>> weights;
  std::vector<std::span<const float>> tables;
  std::vector<std::int64_t> offsets, indices;
  std::vector<fused::embedding_bags> bags;

  inputs(const fused::embedding_plan& plan, int rank, int rows, int bag_length) {
    const auto batch = plan.shape().global_batch;
    for (std::int64_t b = 0; b <= batch; ++b) offsets.push_back(b * bag_length);
    for (std::int64_t i = 0; i < batch * bag_length; ++i) indices.push_back((i * 31 + rank) % rows);
    for (int t = plan.first_table(rank); t < plan.first_table(rank + 1); ++t) {
      const auto elements = static_cast<std::size_t>(rows) * static_cast<std::size_t>(plan.shape().dimension);
      auto& table = weights.emplace_back(shared_buffer<float>::zeros(elements));
      std::ranges::fill(table.span(), 0.01F * static_cast<float>(t + 1));
      tables.emplace_back(table.span());
    }
    bags.assign(weights.size(), {offsets, indices});
  }
};

void on_launched_ranks(communicator auto& comm) {
  // 13 tables over the ranks (not evenly), a batch of 100 rows, slices of 16 rows.
  fused::embedding_options options;
  options.slice_rows = 16;
  options.pooling = fused::pooling::mean;
  fused::embedding_all_to_all op(comm, {13, 32, 100}, options);
  const inputs in(op.plan(), comm.rank(), 50, 4);
  const auto fused_out = op.fused(in.tables, in.bags);
  const std::vector<float> kept(fused_out.begin(), fused_out.end());
  const auto baseline_out = op.baseline(in.tables, in.bags);
  const bool same = std::memcmp(kept.data(), baseline_out.data(), kept.size() * sizeof(float)) == 0;
  // Threads, and MPI ranks on one node, store slices straight into the peers' outputs (an MPI-3
  // shared-memory window for MPI); to MPI ranks on other nodes they go as messages.
  int stored = 0;
  for (int peer = 0; peer < comm.size(); ++peer) stored += op.stores_in_place(peer) ? 1 : 0;
  if (comm.rank() == 0)
    std::printf(
        "%d ranks: output {%lld rows, %lld floats} on rank 0, fused (slices stored into %d of %d ranks' outputs, "
        "messages to the rest) %s baseline\n",
        comm.size(), static_cast<long long>(op.plan().rows_of(0)), static_cast<long long>(op.plan().row_width()),
        stored, comm.size(), same ? "==" : "!=");
  if (!same) throw argument_error(comm.world_rank(), "example 06", "fused and baseline outputs differ");
}

void on_simulated_gpus() {
  auto machine = sim::presets::mi210_nodes(2, 1);  // the paper's inter-node setup
  machine.record_timeline = true;
  double fused_time = 0, baseline_time = 0;
  std::int64_t slice_rows = 0;
  const auto report = sim_gpu::run(2, machine, [&](sim_gpu::communicator& comm) {
    // 16 tables per GPU, batch 512; default options: the operator picks the slice size from the model.
    fused::embedding_all_to_all op(comm, {32, 256, 512});
    if (comm.rank() == 0) slice_rows = op.plan().slice_rows();  // the GPUs are threads: one writes
    const inputs in(op.plan(), comm.rank(), 1000, 10);
    double start = comm.now();
    (void)op.fused(in.tables, in.bags);
    if (comm.rank() == 0) fused_time = comm.now() - start;
    comm.barrier();
    start = comm.now();
    (void)op.baseline(in.tables, in.bags);
    if (comm.rank() == 0) baseline_time = comm.now() - start;
  });
  std::printf(
      "2 simulated MI210 over InfiniBand, slices of %lld rows: fused %.0f µs, baseline %.0f µs (%.0f%% lower)\n",
      static_cast<long long>(slice_rows), fused_time * 1e6, baseline_time * 1e6,
      100 * (1 - fused_time / baseline_time));
  report.timeline->write_chrome_trace("fused_embedding_trace.json");
  std::printf("timeline: fused_embedding_trace.json\n");
}

}  // namespace

int main(int argc, char** argv) {
  // Part 2 runs once, on the first of the launched ranks (a thread, or an MPI process), after part 1.
  return examples::launch(argc, argv, 8, [](communicator auto& comm) {
    on_launched_ranks(comm);
    comm.barrier();
    if (comm.rank() == 0) on_simulated_gpus();
  });
}
