#pragma once
// Modelled time of the embedding-bag + all-to-all on simulated GPUs, baseline and fused, from shapes
// alone (sim/ models). The sim_gpu backend runs the operator with these same rules on real data
// (fused/embedding_all_to_all.hpp); predict() runs them without data for every rank at once, which is
// how the operator decides whether fusing pays and how bench/fused_embedding sweeps the paper's
// configurations in seconds.
//
//   baseline   one pooling kernel per local table (a launch, then one logical workgroup per batch row
//              on min(rows, resident) workgroups), an all-to-all(v) of the pooled blocks (the
//              machine's collective model), and a kernel that unpacks the received blocks into
//              {local batch, tables × dimension} (reads and writes the output once)
//   fused      one persistent kernel of resident workgroups running every pooling task of every local
//              table in the plan's order; the workgroup that finishes a slice last puts it to its
//              destination and, behind a fence, signals its flag; then each workgroup waits for its
//              share of the incoming flags
#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "shardwise/fused/embedding_plan.hpp"
#include "shardwise/fused/primitives.hpp"
#include "shardwise/sim/collective_cost.hpp"
#include "shardwise/sim/device_model.hpp"
#include "shardwise/sim/gpu_initiated_model.hpp"
#include "shardwise/sim/machine.hpp"

namespace shardwise::fused {

// What pooling one bag of `lookups` indices does: a read of every looked-up row and of the offsets and
// indices, a write of the pooled row, an add per looked-up element.
[[nodiscard]] inline sim::work pooling_work(std::int64_t lookups, int dimension) {
  const double d = dimension, looked_up = static_cast<double>(lookups);
  return {looked_up * d, (looked_up + 1) * d * sizeof(float) + (looked_up + 1) * sizeof(std::int64_t)};
}

// The fused kernel of one rank, task by task: call task() for each of the plan's tasks in order.
class fused_kernel_model {
 public:
  fused_kernel_model(const embedding_plan& plan, int rank, const sim::machine& machine,
                     const sim::gpu_initiated_model& model, double start, sim::timeline* trace = nullptr)
      : plan_(&plan), rank_(rank),
        kernel_(rank, machine.device, model, model.resident_workgroups, start + machine.device.launch_latency, trace) {}

  // Task `task_index` of `slice`: one bag of `lookups` indices.
  void task(const embedding_slice& slice, std::int64_t task_index, std::int64_t lookups) {
    const bool remote = slice.destination != rank_;
    const int wg = kernel_.run_task(pooling_work(lookups, plan_->shape().dimension),
                                    remote ? "remote slices" : "local slices");
    if (task_index == 0 || kernel_.clock(wg) >= kernel_.clock(last_)) last_ = wg;
    if (task_index + 1 < slice.rows || !remote) return;
    // The done-bitmask is full: the workgroup that finished last sends the slice and its flag.
    kernel_.put(last_, slice.destination, static_cast<double>(slice.rows * plan_->shape().dimension) * sizeof(float));
    kernel_.fence(last_);
    kernel_.signal(last_, slice.destination, static_cast<std::int64_t>(slice.flag));
  }

  [[nodiscard]] persistent_kernel& kernel() noexcept { return kernel_; }
  [[nodiscard]] const embedding_plan& plan() const noexcept { return *plan_; }
  // What the kernel is called on the stream's track.
  [[nodiscard]] static std::string name() { return "fused embedding + all-to-all"; }

 private:
  const embedding_plan* plan_;
  int rank_;
  persistent_kernel kernel_;
  int last_ = 0;
};

// An ordinary kernel of `tasks` logical workgroups each doing `each`: its modelled duration.
[[nodiscard]] inline double uniform_kernel_duration(const sim::device_model& gpu, const sim::gpu_initiated_model& model,
                                                    std::int64_t tasks, const sim::work& each) {
  const auto resident = static_cast<std::int64_t>(model.resident_workgroups);
  const double rounds = static_cast<double>((tasks + resident - 1) / resident);
  const double share = 1.0 / static_cast<double>(resident);
  return gpu.launch_latency +
         rounds * std::max(each.flops / (gpu.peak_flops * share), each.bytes / (gpu.memory_bandwidth * share));
}

// Bytes rank `source` sends rank `destination` in the baseline's all-to-all.
[[nodiscard]] inline double baseline_bytes(const embedding_plan& plan, int source, int destination) {
  return static_cast<double>(plan.block_floats(source, destination)) * sizeof(float);
}
[[nodiscard]] inline sim::work unpack_work(const embedding_plan& plan, int rank) {
  return {0, 2.0 * static_cast<double>(plan.output_floats(rank)) * sizeof(float)};
}

struct embedding_times {
  double compute = 0;        // baseline pooling and unpacking kernels (slowest rank)
  double communication = 0;  // baseline all-to-all
  double baseline = 0;       // baseline end to end
  double fused = 0;          // fused kernel (slowest rank)
  std::vector<double> fused_by_rank;
  // How much of the shorter part the fused kernel hides: 1 = all of it (more when fusing also saves
  // launches or fills the GPU better).
  [[nodiscard]] double overlap_efficiency() const {
    return (compute + communication - fused) / std::min(compute, communication);
  }
};

// Both paths on every rank, every bag holding `bag_length` indices, starting at time 0.
[[nodiscard]] inline embedding_times predict(const embedding_plan& plan, const sim::machine& machine,
                                             const sim::gpu_initiated_model& model, std::int64_t bag_length,
                                             sim::timeline* trace = nullptr) {
  const int P = plan.ranks();
  const int D = plan.shape().dimension;
  embedding_times t;
  double pooled = 0, unpacked = 0;
  std::vector<std::vector<double>> sent(static_cast<std::size_t>(P));
  std::vector<int> devices;
  for (int r = 0; r < P; ++r) {
    const auto rows = plan.shape().global_batch;
    pooled = std::max(pooled, plan.tables_of(r) * uniform_kernel_duration(machine.device, model, rows,
                                                                          pooling_work(bag_length, D)));
    unpacked = std::max(unpacked, machine.device.duration(unpack_work(plan, r)));
    for (int d = 0; d < P; ++d) sent[static_cast<std::size_t>(r)].push_back(baseline_bytes(plan, r, d));
    devices.push_back(r);
  }
  t.compute = pooled + unpacked;
  t.communication = sim::collective_cost(machine).duration(devices, sent);
  t.baseline = t.compute + t.communication;

  std::vector<fused_kernel_model> kernels;
  std::vector<gpu_message> messages;
  for (int r = 0; r < P; ++r) {
    auto& k = kernels.emplace_back(plan, r, machine, model, 0.0, trace);
    plan.for_each_task(r, [&](std::size_t, const embedding_slice& slice, std::int64_t i, std::int64_t) {
      k.task(slice, i, bag_length);
    });
    const auto& mine = k.kernel().messages();
    messages.insert(messages.end(), mine.begin(), mine.end());
  }
  const auto arrivals = deliver_all(machine.network, messages, model.message_overhead, trace);
  for (auto& k : kernels) {
    t.fused_by_rank.push_back(k.kernel().finish(messages, arrivals));
    t.fused = std::max(t.fused, t.fused_by_rank.back());
  }
  return t;
}

// A slice size and both paths' predicted times with it.
struct slice_choice {
  std::int64_t rows = 0;
  embedding_times times;
};

// The slice size, among 16, 32, …, 1024 rows (up to the first that holds a rank's whole batch share),
// whose fused time predict() finds shortest; the smaller on a tie. Small slices pay the NIC's cost per
// message on every slice, large ones leave the last slices' transfers uncovered at the end: which
// wins depends on the shape and the machine (docs/fused.md), so the operator can ask the model.
[[nodiscard]] inline slice_choice best_slice_rows(const embedding_shape& shape, int ranks, slice_order order,
                                                  const sim::machine& machine, const sim::gpu_initiated_model& model,
                                                  std::int64_t bag_length) {
  const std::int64_t share = (shape.global_batch + ranks - 1) / ranks;
  slice_choice best;
  for (std::int64_t rows = 16; rows <= 1024; rows *= 2) {
    auto times = predict(embedding_plan(shape, ranks, rows, order), machine, model, bag_length);
    if (best.rows == 0 || times.fused < best.times.fused) best = {rows, std::move(times)};
    if (rows >= share) break;
  }
  return best;
}

}  // namespace shardwise::fused
