#pragma once
// The modelled duration of a collective on a group of devices: the steps of its algorithm
// (sim/schedule.hpp) played on the network (sim/network.hpp), each step taking as long as its
// slowest transfer plus the reduction of what arrived. A run shares one collective_cost among its
// ranks; durations are cached per (group, collective, algorithm, size, root), since programs repeat
// the same calls, so each distinct call is simulated once however many ranks and iterations ask.
#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "shardwise/sim/machine.hpp"
#include "shardwise/sim/network.hpp"
#include "shardwise/sim/schedule.hpp"
#include "shardwise/sim/timeline.hpp"

namespace shardwise::sim {

class collective_cost {
 public:
  explicit collective_cost(const machine& model) : model_(&model) {}
  collective_cost(const collective_cost&) = delete;
  collective_cost& operator=(const collective_cost&) = delete;

  // A small number naming a group of devices (communicator ranks in order), the same for equal groups.
  int group_id(const std::vector<int>& devices) {
    std::lock_guard lock(mutex_);
    return groups_.try_emplace(devices, static_cast<int>(groups_.size())).first->second;
  }

  [[nodiscard]] algorithm algorithm_for(const collective_shape& shape, int ranks) const {
    return model_->algorithms.pick(shape, ranks);
  }

  // Seconds from the moment every member has arrived until the collective is complete everywhere.
  double duration(int group, const std::vector<int>& devices, const collective_shape& shape) {
    const int ranks = static_cast<int>(devices.size());
    const algorithm a = algorithm_for(shape, ranks);
    const auto key = std::make_tuple(group, static_cast<int>(shape.kind), static_cast<int>(a), shape.bytes, shape.root);
    std::lock_guard lock(mutex_);
    if (const auto found = cache_.find(key); found != cache_.end()) return found->second;
    const double seconds = play(devices, steps_of(a, shape, ranks), nullptr, 0);
    cache_.emplace(key, seconds);
    return seconds;
  }
  // all_to_all_v: bytes[s][d] from member s to member d (not cached: counts change from call to call).
  double duration(const std::vector<int>& devices, const std::vector<std::vector<double>>& bytes) const {
    return play(devices, pairwise_steps(bytes), nullptr, 0);
  }

  // Draws the collective's link activity from `start` on (for timelines).
  void record_links(timeline& trace, const std::vector<int>& devices, const collective_shape& shape,
                    double start) const {
    const int ranks = static_cast<int>(devices.size());
    play(devices, steps_of(algorithm_for(shape, ranks), shape, ranks), &trace, start);
  }
  void record_links(timeline& trace, const std::vector<int>& devices, const std::vector<std::vector<double>>& bytes,
                    double start) const {
    play(devices, pairwise_steps(bytes), &trace, start);
  }

  // The steps played one after another from `start`: their total duration. With a timeline, every
  // link's busy interval in every step (repeated steps drawn up to a limit that keeps traces small).
  double play(const std::vector<int>& devices, const std::vector<step>& steps, timeline* trace, double start) const {
    constexpr std::int64_t drawn_repeats = 256;
    double elapsed = 0;
    std::vector<transfer> transfers;
    if (trace) trace->name_process(timeline::network_process, "network");
    for (const auto& s : steps) {
      transfers.clear();
      for (const auto& e : s.exchanges)
        transfers.push_back({devices[static_cast<std::size_t>(e.source)],
                             devices[static_cast<std::size_t>(e.destination)], e.bytes, 0});
      const network_timing timing = simulate(model_->network, transfers, trace != nullptr);
      const double step_time = timing.finish() + model_->device.reduction_time(s.reduced_bytes);
      if (trace) {
        for (std::int64_t k = 0; k < std::min(s.repeat, drawn_repeats); ++k)
          for (const auto& busy : timing.links) {
            const track t{timeline::network_process, busy.link};
            if (!trace->has_track(t)) trace->name_track(t, model_->network.link_name(busy.link));
            trace->add(t, std::to_string(busy.transfers) + (busy.transfers == 1 ? " transfer" : " transfers"),
                       start + elapsed + static_cast<double>(k) * step_time + busy.begin, busy.end - busy.begin);
          }
      }
      elapsed += step_time * static_cast<double>(s.repeat);
    }
    return elapsed;
  }

 private:
  [[nodiscard]] std::vector<step> steps_of(algorithm a, const collective_shape& shape, int ranks) const {
    return schedule(a, shape, ranks, model_->algorithms.pipeline_segment_bytes);
  }

  const machine* model_;
  mutable std::mutex mutex_;
  std::map<std::vector<int>, int> groups_;
  std::map<std::tuple<int, int, int, double, int>, double> cache_;
};

}  // namespace shardwise::sim
