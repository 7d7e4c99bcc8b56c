#pragma once
// Modelled time of a persistent kernel on one simulated GPU: W workgroups that loop over logical
// workgroup tasks and communicate from inside the kernel (GPU-initiated put, fence, signal), then wait
// for the flags peers raise in them — the primitives of Punniyamurthy et al.'s fused kernels.
//
//   tasks      each task declares its work; the workgroup free first takes the next task (a ticket
//              counter), and a workgroup alone runs at 1/resident_workgroups of the device's
//              roofline (sim/gpu_initiated_model.hpp), so W workgroups run W tasks at once. A kernel
//              of N ordinary logical workgroups is the same with W = min(N, resident).
//   put        a message of `bytes` to a peer, issued at the workgroup's clock; non-blocking (the
//              workgroup goes on computing)
//   fence      the workgroup's next signals arrive only after every put it issued before the fence
//   signal     an 8-byte message raising flag `flag` on the peer
//   wait       after its tasks, workgroup w waits for the flags f ≡ w (mod W) signalled to this GPU
//              (each persistent workgroup polls a distinct subset, as in the paper)
// Puts and signals of every GPU are delivered together (sim/message_queue.hpp), since they share
// links: deliver_all() over all GPUs' messages, then finish() on each kernel gives its end.
// This header only models time; the data of a simulated run move for real through shared memory
// (comm/shared/symmetric_window.hpp).
#include <algorithm>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "shardwise/core/checked_index.hpp"
#include "shardwise/sim/device_model.hpp"
#include "shardwise/sim/free_first.hpp"
#include "shardwise/sim/gpu_initiated_model.hpp"
#include "shardwise/sim/message_queue.hpp"
#include "shardwise/sim/timeline.hpp"
#include "shardwise/sim/topology.hpp"

namespace shardwise::sim {

// A GPU-initiated message with what orders it: its workgroup, the fences before it, and the flag it
// raises (-1 for a put).
struct gpu_message {
  message sent;
  int workgroup = 0;
  int fences_before = 0;
  std::int64_t flag = -1;
};

// When every message takes effect at its destination: a signal not before the puts its workgroup
// fenced it behind.
[[nodiscard]] inline std::vector<double> deliver_all(const topology& net, std::span<const gpu_message> all,
                                                     double message_overhead, timeline* trace = nullptr) {
  std::vector<message> plain;
  plain.reserve(all.size());
  for (const auto& m : all) plain.push_back(m.sent);
  auto arrival = deliver(net, plain, message_overhead, trace);
  // Latest put arrival per (source, workgroup, fences before it); a signal after f fences waits for
  // all puts with fewer.
  std::map<std::tuple<int, int, int>, double> put_arrivals;
  for (std::size_t i = 0; i < all.size(); ++i)
    if (all[i].flag < 0) {
      auto& latest = put_arrivals[{all[i].sent.source, all[i].workgroup, all[i].fences_before}];
      latest = std::max(latest, arrival[i]);
    }
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (all[i].flag < 0 || all[i].fences_before == 0) continue;
    const auto first = put_arrivals.lower_bound({all[i].sent.source, all[i].workgroup, 0});
    const auto last = put_arrivals.lower_bound({all[i].sent.source, all[i].workgroup, all[i].fences_before});
    for (auto it = first; it != last; ++it) arrival[i] = std::max(arrival[i], it->second);
  }
  return arrival;
}

class persistent_kernel {
 public:
  // A kernel of `workgroups` persistent workgroups (at most the resident limit) on GPU `device`, its
  // first instruction at `start` (launch latency already counted by the caller). `trace` may be null.
  persistent_kernel(int device, const device_model& gpu, const gpu_initiated_model& model, int workgroups, double start,
                    timeline* trace = nullptr)
      : device_(device),
        gpu_(gpu),
        model_(model),
        clocks_(static_cast<std::size_t>(std::clamp(workgroups, 1, model.resident_workgroups)), start),
        drawn_(clocks_.size()),
        start_(start),
        trace_(trace) {
    all_free_at(start);
    if (trace_)
      for (std::size_t w = 0; w < clocks_.size(); ++w)
        trace_->name_track({device_, workgroup_track + static_cast<std::int64_t>(w)}, "workgroup " + std::to_string(w));
  }

  // The track id of workgroup 0 within its GPU's process (streams use small ids).
  static constexpr std::int64_t workgroup_track = 1000;

  [[nodiscard]] int workgroups() const noexcept { return static_cast<int>(clocks_.size()); }
  [[nodiscard]] double clock(int workgroup) const {
    return element_at(clocks_, workgroup, device_, "sim::persistent_kernel::clock", "workgroup");
  }
  [[nodiscard]] std::span<const double> clocks() const noexcept { return clocks_; }
  [[nodiscard]] const std::vector<gpu_message>& messages() const noexcept { return messages_; }

  // Runs a logical task doing `w` on the workgroup free first; returns that workgroup.
  int run_task(const work& w, const std::string& label = "task") {
    const auto wg = static_cast<std::size_t>(free_.workgroup());
    const double share = 1.0 / model_.resident_workgroups;
    const double begin = clocks_[wg];
    clocks_[wg] += gpu_.time_on_share(w, share);
    free_.busy_until(clocks_[wg]);
    draw(wg, label, begin, clocks_[wg]);
    return static_cast<int>(wg);
  }

  // Ends this kernel's tasks and starts the next kernel of the stream (kernels launched in turn, one
  // after another): every workgroup resumes `launch_latency` after the last one finished. Puts and
  // signals already issued travel on.
  void relaunch(double launch_latency) {
    all_free_at(*std::max_element(clocks_.begin(), clocks_.end()) + launch_latency);
  }

  void put(int workgroup, int peer, double bytes) { issue(workgroup, peer, bytes, -1); }
  void fence(int workgroup) { ++fences_[workgroup]; }
  void signal(int workgroup, int peer, std::int64_t flag) { issue(workgroup, peer, sizeof(std::uint64_t), flag); }

  // The kernel's end, given every GPU's messages and their arrivals (deliver_all): each workgroup
  // after its tasks and its flags.
  double finish(std::span<const gpu_message> all, std::span<const double> arrivals) {
    std::vector<double> ends = clocks_;
    for (std::size_t i = 0; i < all.size(); ++i) {
      if (all[i].flag < 0 || all[i].sent.destination != device_) continue;
      auto& end = ends[static_cast<std::size_t>(all[i].flag % workgroups())];
      end = std::max(end, arrivals[i]);
    }
    for (std::size_t w = 0; w < clocks_.size(); ++w) {
      flush(w);
      if (trace_ && ends[w] > clocks_[w])
        trace_->add({device_, workgroup_track + static_cast<std::int64_t>(w)}, "wait for flags", clocks_[w],
                    ends[w] - clocks_[w]);
    }
    return std::max(start_, *std::max_element(ends.begin(), ends.end()));
  }

 private:
  // Every workgroup idle from `time` on.
  void all_free_at(double time) {
    std::fill(clocks_.begin(), clocks_.end(), time);
    free_ = free_first(clocks_);
  }

  void issue(int workgroup, int peer, double bytes, std::int64_t flag) {
    messages_.push_back({{device_, peer, bytes, clock(workgroup)}, workgroup, fences_[workgroup], flag});
  }

  // Consecutive tasks of one label on a workgroup are drawn as one interval (a kernel has up to
  // millions of tasks; a trace wants a few thousand intervals).
  struct drawing {
    std::string label;
    double begin = 0;
    double end = 0;
    int tasks = 0;
  };
  void draw(std::size_t wg, const std::string& label, double begin, double end) {
    if (!trace_) return;
    auto& d = drawn_[wg];
    if (d.tasks > 0 && d.label != label) flush(wg);
    if (d.tasks == 0) d = {label, begin, end, 0};
    d.end = end;
    ++d.tasks;
  }
  void flush(std::size_t wg) {
    auto& d = drawn_[wg];
    if (!trace_ || d.tasks == 0) return;
    trace_->add({device_, workgroup_track + static_cast<std::int64_t>(wg)}, d.label, d.begin, d.end - d.begin,
                {{"tasks", std::to_string(d.tasks)}});
    d.tasks = 0;
  }

  int device_;
  device_model gpu_;
  gpu_initiated_model model_;
  std::vector<double> clocks_;
  free_first free_;
  std::vector<drawing> drawn_;
  std::map<int, int> fences_;
  std::vector<gpu_message> messages_;
  double start_;
  timeline* trace_;
};

}  // namespace shardwise::sim
