#pragma once
// Virtual time on one simulated GPU: the clock of the host thread that drives it, and its streams
// (in-order queues) with events between them.
//
//   host time     advances only when the host waits (synchronize, a blocking collective, wait())
//   a stream      runs what is enqueued on it in order: an item starts at max(host time at enqueue,
//                 the end of the item before it, events it was told to wait for) and holds the
//                 stream for its modelled duration
//   an event      a point in a stream's virtual time (record()), which another stream can wait for
//                 and the host can synchronize with
//
// Data are real: launch(w, compute) runs `compute` on the host at once, so results are exact and
// what the kernel produces can be used right away; only the kernel's time is modelled, from the work
// it declares (sim/device_model.hpp).
#include <algorithm>
#include <deque>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "shardwise/core/checked_index.hpp"
#include "shardwise/sim/device_model.hpp"
#include "shardwise/sim/timeline.hpp"

namespace shardwise::sim {

struct event {
  double time = 0;  // s of virtual time
};

using event_details = std::vector<std::pair<std::string, std::string>>;
struct no_details {
  event_details operator()() const { return {}; }
};

class device;

class stream {
 public:
  stream(device& owner, int id, std::string name) : owner_(&owner), id_(id), name_(std::move(name)) {}
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;

  [[nodiscard]] int id() const noexcept { return id_; }
  [[nodiscard]] const std::string& name() const noexcept { return name_; }

  // Enqueues a kernel doing `w`, running `compute` now for its real result (after what is queued
  // before it, whose results it may read). Returns when the kernel ends in virtual time.
  template <class Compute>
  double launch(const work& w, Compute&& compute, const std::string& name = "kernel") {
    settle();
    std::forward<Compute>(compute)();
    return launch(w, name);
  }
  double launch(const work& w, const std::string& name = "kernel");

  [[nodiscard]] event record() {
    settle();
    return {ready_};
  }
  void wait(event e) {
    settle();
    ready_ = std::max(ready_, e.time);
  }
  // The host waits until everything enqueued so far has finished.
  void synchronize();

  // When the next item could start if enqueued now (host time and what is queued).
  [[nodiscard]] double available() const;
  [[nodiscard]] double ready() const noexcept { return ready_; }

  // For backends: the stream is busy over [start, end) with `name` (end ≥ what it held before).
  // `details()` gives the timeline event's key-value pairs; it runs only where a timeline is recorded,
  // since formatting them for every kernel and collective of thousands of ranks costs real time.
  template <class Details = no_details>
  requires std::is_invocable_r_v<event_details, Details&>
  void occupy(const std::string& name, double start, double end, Details details = {});
  // For backends: work started on this stream whose end is not known yet (a started collective).
  // Anything later enqueued on the stream first calls these, in order, to learn it.
  void defer(std::function<void()> settle_later) { unsettled_.push_back(std::move(settle_later)); }
  void settle() {
    while (!unsettled_.empty()) {
      auto next = std::move(unsettled_.front());
      unsettled_.pop_front();
      next();
    }
  }

 private:
  device* owner_;
  int id_;
  std::string name_;
  double ready_ = 0;
  std::deque<std::function<void()>> unsettled_;
};

class device {
 public:
  // `trace` may be null (no timeline).
  device(int id, device_model model, timeline* trace) : id_(id), model_(model), trace_(trace) {
    if (trace_) trace_->name_process(id_, "GPU " + std::to_string(id_));
    create_stream("stream 0");
  }
  device(const device&) = delete;
  device& operator=(const device&) = delete;

  [[nodiscard]] int id() const noexcept { return id_; }
  [[nodiscard]] const device_model& model() const noexcept { return model_; }
  [[nodiscard]] timeline* trace() const noexcept { return trace_; }

  [[nodiscard]] double host_time() const noexcept { return host_time_; }
  void wait_until(double time) noexcept { host_time_ = std::max(host_time_, time); }
  void synchronize(event e) noexcept { wait_until(e.time); }
  // Waits for every stream.
  void synchronize() {
    for (auto& s : streams_) s.synchronize();
  }

  // The end of the latest kernel a library operation launched (sim_gpu::communicator::launch), which
  // every communicator's collectives and messages on this device wait for.
  [[nodiscard]] event operations_done() const noexcept { return operations_done_; }
  void operation_launched(double end) noexcept { operations_done_.time = std::max(operations_done_.time, end); }

  [[nodiscard]] stream& default_stream() noexcept { return streams_.front(); }
  // Streams live as long as the device (references stay valid).
  stream& create_stream(std::string name = {}) {
    const int id = static_cast<int>(streams_.size());
    auto& created = streams_.emplace_back(*this, id, name.empty() ? "stream " + std::to_string(id) : std::move(name));
    if (trace_) trace_->name_track({id_, id}, created.name());
    return created;
  }
  [[nodiscard]] stream& stream_at(int id) { return element_at(streams_, id, id_, "sim::device::stream_at", "stream"); }

 private:
  int id_;
  device_model model_;
  timeline* trace_;
  double host_time_ = 0;
  event operations_done_;
  std::deque<stream> streams_;
};

inline double stream::available() const { return std::max(ready_, owner_->host_time()); }

inline double stream::launch(const work& w, const std::string& name) {
  settle();
  const double start = available();
  const double duration = owner_->model().duration(w);
  occupy(name, start, start + duration,
         [&w]() -> event_details { return {{"flops", std::to_string(w.flops)}, {"bytes", std::to_string(w.bytes)}}; });
  return ready_;
}

inline void stream::synchronize() {
  settle();
  owner_->wait_until(ready_);
}

template <class Details>
requires std::is_invocable_r_v<event_details, Details&>
void stream::occupy(const std::string& name, double start, double end, Details details) {
  ready_ = std::max(ready_, end);
  if (auto* trace = owner_->trace()) trace->add({owner_->id(), id_}, name, start, end - start, details());
}

}  // namespace shardwise::sim
