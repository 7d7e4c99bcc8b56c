#pragma once
// Modelled time of the embedding-bag + all-to-all on simulated GPUs, baseline and fused, forward and
// backward, from shapes alone (sim/ models). The sim_gpu backend runs the operator with these same rules
// on real data (fused/embedding_all_to_all.hpp, fused/embedding_modelled_backend.hpp); predict() and
// predict_backward() run them without data for every rank at once, which is how the operator decides
// whether fusing pays and how bench/fused_embedding sweeps the paper's configurations in seconds.
//
//   baseline   one pooling kernel per local table (a launch, then one logical workgroup per batch row
//              on min(rows, resident) workgroups), an all-to-all(v) of the pooled blocks (the
//              machine's collective model), and a kernel that unpacks the received blocks into
//              {local batch, tables × dimension} (reads and writes the output once)
//   fused      one persistent kernel of resident workgroups running every pooling task of every local
//              table in the plan's order; the workgroup that finishes a slice last puts it to its
//              destination and, behind a fence, signals its flag; then each workgroup waits for its
//              share of the incoming flags. With gpu_initiated_model::kernel_per_table, a kernel per
//              table instead, each launched when the previous one has ended (the table_by_table order
//              keeps a table's tasks together)
// Backward:
//   baseline   a kernel that packs the output gradient by owner (reads and writes it once), the
//              all-to-all(v), and one scatter-add kernel per local table (a logical workgroup per batch
//              row adds that row's gradient into each row its bag looked up)
//   fused      one persistent kernel: its workgroups first put every slice of the output gradient that
//              other ranks' tables need (each straight from memory, its flag behind a fence), then add
//              this rank's own rows, then each received slice's rows once its flag has arrived, on the
//              workgroup free first
#include <algorithm>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "shardwise/fused/embedding_plan.hpp"
#include "shardwise/fused/primitives.hpp"
#include "shardwise/sim/collective_cost.hpp"
#include "shardwise/sim/device_model.hpp"
#include "shardwise/sim/free_first.hpp"
#include "shardwise/sim/gpu_initiated_model.hpp"
#include "shardwise/sim/machine.hpp"

namespace shardwise::fused {

// What pooling one bag of `lookups` indices does: a read of every looked-up row and of the offsets and
// indices, a write of the pooled row, an add per looked-up element.
[[nodiscard]] inline work pooling_work(std::int64_t lookups, int dimension) {
  const double d = dimension, looked_up = static_cast<double>(lookups);
  return {looked_up * d, (looked_up + 1) * d * sizeof(float) + (looked_up + 1) * sizeof(std::int64_t)};
}

// What adding one bag's gradient into the rows it looked up does: a read of the bag's gradient row and
// of its indices, a read and a write of every looked-up gradient row, an add per looked-up element.
[[nodiscard]] inline work scatter_work(std::int64_t lookups, int dimension) {
  const double d = dimension, looked_up = static_cast<double>(lookups);
  return {looked_up * d, (2 * looked_up + 1) * d * sizeof(float) + (looked_up + 1) * sizeof(std::int64_t)};
}

// One task doing `w` on a workgroup alone (1/resident_workgroups of the device).
[[nodiscard]] inline double task_duration(const sim::device_model& gpu, const sim::gpu_initiated_model& model,
                                          const work& w) {
  return gpu.time_on_share(w, 1.0 / static_cast<double>(model.resident_workgroups));
}

// The fused kernel of one rank, task by task: call task() for each of the plan's tasks in order.
class fused_kernel_model {
 public:
  fused_kernel_model(const embedding_plan& plan, int rank, const sim::machine& machine,
                     const sim::gpu_initiated_model& model, double start, sim::timeline* trace = nullptr)
      : plan_(&plan),
        rank_(rank),
        launch_latency_(model.kernel_per_table ? machine.device.launch_latency : -1),
        kernel_(rank, machine.device, model, model.resident_workgroups, start + machine.device.launch_latency, trace) {}
  // Holds the plan by reference (a simulation of thousands of ranks has one plan, not one each). The
  // refusal of a temporary is one line, so that the compiler's excerpt of it shows the words.
  fused_kernel_model(const embedding_plan&&, auto&&...) = delete;  // keeps a reference: name the plan in a variable

  // Task `task_index` of `slice`: one bag of `lookups` indices.
  void task(const embedding_slice& slice, std::int64_t task_index, std::int64_t lookups) {
    if (launch_latency_ >= 0 && slice.table != table_) {
      if (table_ >= 0) kernel_.relaunch(launch_latency_);
      table_ = slice.table;
    }
    const bool remote = slice.destination != rank_;
    const int wg = kernel_.run_task(pooling_work(lookups, plan_->dimension_of(slice.table)),
                                    remote ? "remote slices" : "local slices");
    if (task_index == 0 || kernel_.clock(wg) >= kernel_.clock(last_)) last_ = wg;
    if (task_index + 1 < slice.rows || !remote) return;
    // The done-bitmask is full: the workgroup that finished last sends the slice and its flag.
    kernel_.put(last_, slice.destination,
                static_cast<double>(slice.rows * plan_->dimension_of(slice.table)) * sizeof(float));
    kernel_.fence(last_);
    kernel_.signal(last_, slice.destination, static_cast<std::int64_t>(slice.flag));
  }

  [[nodiscard]] persistent_kernel& kernel() noexcept { return kernel_; }
  [[nodiscard]] const embedding_plan& plan() const noexcept { return *plan_; }
  // What the kernel is called on the stream's track.
  [[nodiscard]] static std::string name() { return "fused embedding + all-to-all"; }
  // The kernel's end, given every GPU's messages and their arrivals (deliver_all).
  double finish(std::span<const gpu_message> all, std::span<const double> arrivals) {
    return kernel_.finish(all, arrivals);
  }

 private:
  const embedding_plan* plan_;
  int rank_;
  double launch_latency_;  // of each table's kernel; -1: one persistent kernel
  persistent_kernel kernel_;
  int last_ = 0;
  int table_ = -1;  // whose kernel runs (kernel per table)
};

// The fused backward kernel of one rank: send() each of its slices in the plan's order
// (gradient_slices), then add() each bag's gradient in the order it adds them (for_each_gradient_slice).
class fused_backward_model {
 public:
  fused_backward_model(const embedding_plan& plan, int rank, const sim::machine& machine,
                       const sim::gpu_initiated_model& model, double start, sim::timeline* trace = nullptr)
      : plan_(&plan),
        rank_(rank),
        device_(machine.device),
        model_(model),
        kernel_(rank, machine.device, model, model.resident_workgroups, start + machine.device.launch_latency, trace) {}
  fused_backward_model(const embedding_plan&&, auto&&...) = delete;  // keeps a reference: name the plan in a variable

  // A slice of this rank's output gradient leaves for its table's owner: the workgroups take the puts
  // in turn, each with its flag behind a fence.
  void send(const embedding_slice& slice) {
    const int wg = static_cast<int>(sent_++ % static_cast<std::size_t>(kernel_.workgroups()));
    kernel_.put(wg, slice.destination,
                static_cast<double>(slice.rows * plan_->dimension_of(slice.table)) * sizeof(float));
    kernel_.fence(wg);
    kernel_.signal(wg, slice.destination, static_cast<std::int64_t>(slice.flag));
  }
  // One bag of `lookups` indices of `table`, from rank `source`'s rows (whose slice raises `flag` here).
  void add(int table, int source, std::size_t flag, std::int64_t lookups) {
    const auto w = scatter_work(lookups, plan_->dimension_of(table));
    if (source == rank_) kernel_.run_task(w, "local slices");
    else
      received_.push_back({static_cast<std::int64_t>(flag), w});
  }

  [[nodiscard]] persistent_kernel& kernel() noexcept { return kernel_; }
  [[nodiscard]] const embedding_plan& plan() const noexcept { return *plan_; }
  [[nodiscard]] static std::string name() { return "fused all-to-all + scatter-add"; }

  // The kernel's end: after its own rows, each received slice's rows on the workgroup free first, none
  // before its flag arrived (the flags, from every GPU's messages and their arrivals: deliver_all).
  double finish(std::span<const gpu_message> all, std::span<const double> arrivals) {
    std::map<std::int64_t, double> arrived;
    for (std::size_t i = 0; i < all.size(); ++i)
      if (all[i].flag >= 0 && all[i].sent.destination == rank_) arrived[all[i].flag] = arrivals[i];
    // Each task's flag looked up once, not in every comparison of the sort.
    std::vector<std::pair<double, const received*>> by_arrival;
    by_arrival.reserve(received_.size());
    for (const auto& task : received_) {
      const auto found = arrived.find(task.flag);
      by_arrival.emplace_back(found == arrived.end() ? 0.0 : found->second, &task);
    }
    std::stable_sort(by_arrival.begin(), by_arrival.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    double end = kernel_.finish({}, {});
    sim::free_first free(kernel_.clocks());
    for (const auto& [arrival, task] : by_arrival) {
      const double done = std::max(free.time(), arrival) + task_duration(device_, model_, task->work);
      free.busy_until(done);
      end = std::max(end, done);
    }
    return end;
  }

 private:
  struct received {
    std::int64_t flag;
    shardwise::work work;
  };
  const embedding_plan* plan_;
  int rank_;
  sim::device_model device_;
  sim::gpu_initiated_model model_;
  persistent_kernel kernel_;
  std::size_t sent_ = 0;
  std::vector<received> received_;
};

// An ordinary kernel of `tasks` logical workgroups each doing `each`: its modelled duration.
[[nodiscard]] inline double uniform_kernel_duration(const sim::device_model& gpu, const sim::gpu_initiated_model& model,
                                                    std::int64_t tasks, const work& each) {
  const auto resident = static_cast<std::int64_t>(model.resident_workgroups);
  const std::int64_t rounds = (tasks + resident - 1) / resident;
  return gpu.launch_latency + static_cast<double>(rounds) * task_duration(gpu, model, each);
}

// Bytes rank `source` sends rank `destination` in the baseline's all-to-all.
[[nodiscard]] inline double baseline_bytes(const embedding_plan& plan, int source, int destination) {
  return static_cast<double>(plan.block_floats(source, destination)) * sizeof(float);
}
// Reading and writing `rank`'s output once: unpacking it (forward), packing its gradient (backward).
[[nodiscard]] inline work unpack_work(const embedding_plan& plan, int rank) {
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

namespace detail {

// Both paths of one direction on every rank: the baseline's kernel of `task_work` per table and batch
// row, its copy of the output, and its all-to-all of `sent(r, d)` bytes; the fused kernels (`Kernel`),
// each told its tasks by `run(kernel, rank)`, with every rank's messages delivered together.
template <class Kernel, class TaskWork, class Sent, class Run>
[[nodiscard]] embedding_times predict_paths(const embedding_plan& plan, const sim::machine& machine,
                                            const sim::gpu_initiated_model& model, sim::timeline* trace,
                                            TaskWork&& task_work, Sent&& sent_bytes, Run&& run) {
  const int P = plan.ranks();
  embedding_times t;
  double kernels_time = 0, copied = 0;
  std::vector<std::vector<double>> sent(static_cast<std::size_t>(P));
  std::vector<int> devices;
  for (int r = 0; r < P; ++r) {
    double mine = 0;
    for (int table = plan.first_table(r); table < plan.first_table(r + 1); ++table)
      mine += uniform_kernel_duration(machine.device, model, plan.shape().global_batch,
                                      task_work(plan.dimension_of(table)));
    kernels_time = std::max(kernels_time, mine);
    copied = std::max(copied, machine.device.duration(unpack_work(plan, r)));
    for (int d = 0; d < P; ++d) sent[static_cast<std::size_t>(r)].push_back(sent_bytes(r, d));
    devices.push_back(r);
  }
  t.compute = kernels_time + copied;
  t.communication = sim::collective_cost(machine).choose(devices, sent).seconds;
  t.baseline = t.compute + t.communication;

  std::vector<Kernel> kernels;
  std::vector<gpu_message> messages;
  for (int r = 0; r < P; ++r) {
    auto& k = kernels.emplace_back(plan, r, machine, model, 0.0, trace);
    run(k, r);
    const auto& mine = k.kernel().messages();
    messages.insert(messages.end(), mine.begin(), mine.end());
  }
  const auto arrivals = deliver_all(machine.network, messages, model.message_overhead, trace);
  for (auto& k : kernels) {
    t.fused_by_rank.push_back(k.finish(messages, arrivals));
    t.fused = std::max(t.fused, t.fused_by_rank.back());
  }
  return t;
}

}  // namespace detail

// Both paths on every rank, every bag holding `bag_length` indices, starting at time 0.
[[nodiscard]] inline embedding_times predict(const embedding_plan& plan, const sim::machine& machine,
                                             const sim::gpu_initiated_model& model, std::int64_t bag_length,
                                             sim::timeline* trace = nullptr) {
  return detail::predict_paths<fused_kernel_model>(
      plan, machine, model, trace, [&](int dimension) { return pooling_work(bag_length, dimension); },
      [&](int r, int d) { return baseline_bytes(plan, r, d); },
      [&](fused_kernel_model& k, int r) {
        plan.for_each_task(r, [&](std::size_t, const embedding_slice& slice, std::int64_t i, std::int64_t) {
          k.task(slice, i, bag_length);
        });
      });
}

// The backward's both paths on every rank, every bag holding `bag_length` indices, from time 0
// (compute: the packing and scatter-add kernels; communication: the all-to-all).
[[nodiscard]] inline embedding_times predict_backward(const embedding_plan& plan, const sim::machine& machine,
                                                      const sim::gpu_initiated_model& model, std::int64_t bag_length,
                                                      sim::timeline* trace = nullptr) {
  return detail::predict_paths<fused_backward_model>(
      plan, machine, model, trace, [&](int dimension) { return scatter_work(bag_length, dimension); },
      [&](int r, int owner) { return baseline_bytes(plan, owner, r); },
      [&](fused_backward_model& k, int r) {
        for (const auto& slice : plan.gradient_slices(r)) k.send(slice);
        plan.for_each_gradient_slice(r, [&](int source, const embedding_slice& slice) {
          for (std::int64_t row = 0; row < slice.rows; ++row) k.add(slice.table, source, slice.flag, bag_length);
        });
      });
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
