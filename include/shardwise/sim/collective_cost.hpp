#pragma once
// The modelled duration of a collective on a group of devices: the steps of its algorithm
// (sim/schedule.hpp) played on the network (sim/network.hpp), each step taking as long as its
// slowest transfer plus the reduction of what arrived. A run shares one collective_cost among its
// ranks; durations are cached per (group, collective, size, root), since programs repeat the same
// calls, so each distinct call is simulated once however many ranks and iterations ask.
//
// Which algorithm: a fixed choice (machine.algorithms), or for an automatic one the applicable
// algorithm of least modelled time on the group's devices — so the placement decides: where the GPUs
// of a node share one network interface, a large all-reduce goes hierarchical or round the ring, whose
// steps cross the interface once each way, not Rabenseifner, whose exchanges between the nodes queue
// on it. The hierarchical algorithm takes the group's nodes from the topology (placement_of).
// algorithm_choice::by_modelled_cost = false keeps the MPICH rule instead.
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

  // The algorithm the collective runs on group `group` (devices, in communicator rank order).
  algorithm algorithm_for(int group, const std::vector<int>& devices, const collective_shape& shape) {
    return timed(group, devices, shape).chosen;
  }

  // Seconds from the moment every member has arrived until the collective is complete everywhere.
  double duration(int group, const std::vector<int>& devices, const collective_shape& shape) {
    return timed(group, devices, shape).seconds;
  }
  // all_to_all_v: bytes[s][d] from member s to member d (not cached: counts change from call to call).
  double duration(const std::vector<int>& devices, const std::vector<std::vector<double>>& bytes) const {
    return play(devices, pairwise_steps(bytes), nullptr, 0);
  }

  // Draws the collective's link activity from `start` on (for timelines).
  void record_links(timeline& trace, int group, const std::vector<int>& devices, const collective_shape& shape,
                    double start) {
    play(devices, steps_of(algorithm_for(group, devices, shape), shape, devices), &trace, start);
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
  struct choice {
    algorithm chosen;
    double seconds;
  };

  [[nodiscard]] std::vector<step> steps_of(algorithm a, const collective_shape& shape,
                                           const std::vector<int>& devices) const {
    return schedule(a, shape, static_cast<int>(devices.size()), model_->algorithms.pipeline_segment_bytes,
                    placement_of(devices));
  }

  // The group's members in nodes of equal width, consecutive in rank order (how the hierarchical
  // algorithm sees them); nodes of one member when the group is not laid out so.
  [[nodiscard]] placement placement_of(const std::vector<int>& devices) const {
    const int per_node = model_->network.gpus_per_node();
    const auto node = [&](std::size_t i) { return devices[i] / per_node; };
    std::size_t width = 1;
    while (width < devices.size() && node(width) == node(0)) ++width;
    if (devices.size() % width != 0) return {};
    for (std::size_t i = 0; i < devices.size(); ++i)
      if (node(i) != node(i - i % width)) return {};
    return {static_cast<int>(width)};
  }

  choice timed(int group, const std::vector<int>& devices, const collective_shape& shape) {
    const int ranks = static_cast<int>(devices.size());
    const auto key = std::make_tuple(group, static_cast<int>(shape.kind), shape.bytes, shape.root);
    std::lock_guard lock(mutex_);
    if (const auto found = cache_.find(key); found != cache_.end()) return found->second;
    const algorithm_choice& rules = model_->algorithms;
    const algorithm by_rule = rules.pick(shape, ranks);
    choice best{by_rule, play(devices, steps_of(by_rule, shape, devices), nullptr, 0)};
    if (rules.by_modelled_cost && rules.is_automatic(shape.kind))
      for (const algorithm a : {algorithm::ring, algorithm::recursive_doubling, algorithm::rabenseifner,
                                algorithm::hierarchical, algorithm::binomial, algorithm::pipelined})
        if (a != by_rule && applies(shape.kind, a, ranks, placement_of(devices))) {
          const double seconds = play(devices, steps_of(a, shape, devices), nullptr, 0);
          if (seconds < best.seconds) best = {a, seconds};
        }
    cache_.emplace(key, best);
    return best;
  }

  const machine* model_;
  mutable std::mutex mutex_;
  std::map<std::vector<int>, int> groups_;
  std::map<std::tuple<int, int, double, int>, choice> cache_;
};

}  // namespace shardwise::sim
