#pragma once
// Cost-only simulation: shapes and modelled time, no data, no threads. For SPMD programs whose calls
// do not depend on data: every rank issues the same collectives in the same order, so the program
// runs once, symbolically, and each call updates every rank's clocks at once (O(P) per call, each
// distinct collective simulated on the network once: sim/collective_cost.hpp). This is how a study
// of 1024 GPUs runs in seconds on a laptop.
//
//   auto report = sim::cost_only::run(1024, machine, [](sim::cost_only::communicator& world) {
//     auto rows = world.split([](int r) { return r / 32; });      // 32 groups of 32, all at once
//     world.launch({2e12, 4e9});                                  // the same kernel on every GPU
//     rows.all_reduce<float>(1 << 20);                            // in every group at once
//   });
//
// Time follows the sim_gpu backend's rules exactly (sim/sim_gpu.hpp): a collective starts when all
// members have arrived (host and stream) and the group's previous collective has ended; blocking
// calls move host clocks to the end; started ones on wait(). A collective is played beside the
// collectives of other groups still running on its devices that were priced before it; here a
// collective is priced when it starts, there when a rank waits for it, so both give the same times
// (tested) for programs that wait for their collectives in the order they start them.
#include <algorithm>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "shardwise/core/checked_index.hpp"
#include "shardwise/core/error.hpp"
#include "shardwise/sim/collective_cost.hpp"
#include "shardwise/sim/collectives_in_flight.hpp"
#include "shardwise/sim/machine.hpp"
#include "shardwise/sim/timeline.hpp"

namespace shardwise::sim::cost_only {

namespace detail {

// Every rank's clocks: host, and the end of what each stream holds.
struct clocks {
  clocks(int ranks, machine machine_model)
      : model(std::move(machine_model)),
        trace(model.record_timeline ? std::make_shared<timeline>() : nullptr),
        costs(model),
        host(static_cast<std::size_t>(ranks), 0.0),
        in_flight(static_cast<std::size_t>(ranks)) {
    stream_ready.emplace_back(host.size(), 0.0);
    if (trace)
      for (int r = 0; r < ranks; ++r) {
        trace->name_process(r, "GPU " + std::to_string(r));
        trace->name_track({r, 0}, "stream 0");
      }
  }
  std::vector<double>& ready(int stream) {
    while (static_cast<int>(stream_ready.size()) <= stream) {
      stream_ready.emplace_back(host.size(), 0.0);
      if (trace)
        for (int r = 0; r < static_cast<int>(host.size()); ++r)
          trace->name_track({r, static_cast<int>(stream_ready.size()) - 1},
                            "stream " + std::to_string(stream_ready.size() - 1));
    }
    return stream_ready[static_cast<std::size_t>(stream)];
  }

  const machine model;
  const std::shared_ptr<timeline> trace;
  collective_cost costs;
  std::vector<double> host;
  std::vector<std::vector<double>> stream_ready;
  std::vector<collectives_in_flight> in_flight;  // per rank
};

struct group {
  std::vector<int> devices;
  int id = 0;
  std::vector<double> last_end;  // per member: each member's collective may meet others beside it
};

}  // namespace detail

// Per-rank ends of a started collective.
struct pending {
  std::vector<double> ends;  // by world rank; ranks outside the communicator keep 0
};

// A communicator for every group of a partition of the ranks at once (the world: one group).
class communicator {
 public:
  communicator(std::shared_ptr<detail::clocks> state, std::vector<detail::group> groups)
      : state_(std::move(state)), groups_(std::move(groups)) {}

  [[nodiscard]] int world_size() const noexcept { return static_cast<int>(state_->host.size()); }
  [[nodiscard]] int groups() const noexcept { return static_cast<int>(groups_.size()); }
  [[nodiscard]] const std::vector<int>& members(int group) const {
    return element_at(groups_, group, -1, "sim::cost_only::communicator::members", "group").devices;
  }
  [[nodiscard]] double now(int world_rank) const {
    return element_at(state_->host, world_rank, -1, "sim::cost_only::communicator::now", "rank");
  }
  [[nodiscard]] double makespan() const { return *std::max_element(state_->host.begin(), state_->host.end()); }

  // Collectives go on stream `s` of every member (stream 0 unless told otherwise).
  void use_stream(int s) {
    if (s < 0) throw argument_error(-1, "cost_only::use_stream", "stream " + std::to_string(s) + " is negative");
    state_->ready(s);
    stream_ = s;
  }

  // The same kernel, or one per rank, on the current stream of every member.
  void launch(const work& w, const std::string& name = "kernel") {
    launch([&](int) { return w; }, name);
  }
  void launch(const std::function<work(int world_rank)>& work_of, const std::string& name = "kernel") {
    auto& ready = state_->ready(stream_);
    for (const auto& g : groups_)
      for (const int r : g.devices) {
        const auto i = static_cast<std::size_t>(r);
        const double start = std::max(ready[i], state_->host[i]);
        ready[i] = start + state_->model.device.duration(work_of(r));
        if (state_->trace) state_->trace->add({r, stream_}, name, start, ready[i] - start);
      }
  }
  // Every member's host waits for its streams.
  void synchronize() {
    for (const auto& g : groups_)
      for (const int r : g.devices)
        for (const auto& ready : state_->stream_ready)
          state_->host[static_cast<std::size_t>(r)] =
              std::max(state_->host[static_cast<std::size_t>(r)], ready[static_cast<std::size_t>(r)]);
  }

  // Element counts as in the communicator concept: the whole vector, or one rank's block.
  template <class T>
  void all_reduce(std::size_t count) {
    wait(start({collective::all_reduce, bytes<T>(count), 0}));
  }
  template <class T>
  void reduce(std::size_t count, int root) {
    wait(start({collective::reduce, bytes<T>(count), root}));
  }
  template <class T>
  void reduce_scatter(std::size_t block) {
    wait(start({collective::reduce_scatter, bytes<T>(block), 0}));
  }
  template <class T>
  void all_gather(std::size_t block) {
    wait(start({collective::all_gather, bytes<T>(block), 0}));
  }
  template <class T>
  void all_to_all(std::size_t block) {
    wait(start({collective::all_to_all, bytes<T>(block), 0}));
  }
  template <class T>
  void broadcast(std::size_t count, int root) {
    wait(start({collective::broadcast, bytes<T>(count), root}));
  }
  void barrier() { wait(start({collective::barrier, 0, 0})); }

  template <class T>
  [[nodiscard]] pending iall_reduce(std::size_t count) {
    return start({collective::all_reduce, bytes<T>(count), 0});
  }
  template <class T>
  [[nodiscard]] pending ireduce_scatter(std::size_t block) {
    return start({collective::reduce_scatter, bytes<T>(block), 0});
  }
  template <class T>
  [[nodiscard]] pending iall_gather(std::size_t block) {
    return start({collective::all_gather, bytes<T>(block), 0});
  }
  template <class T>
  [[nodiscard]] pending iall_to_all(std::size_t block) {
    return start({collective::all_to_all, bytes<T>(block), 0});
  }

  void wait(const pending& started) {
    for (std::size_t r = 0; r < started.ends.size(); ++r) state_->host[r] = std::max(state_->host[r], started.ends[r]);
  }

  // Within each group, ranks with equal colour form a group, ordered by key and then by rank; it takes
  // the time of an all-gather of two integers, as in the sim_gpu backend.
  [[nodiscard]] communicator split(
      const std::function<int(int world_rank)>& color_of,
      const std::function<int(int world_rank)>& key_of = [](int) { return 0; }) {
    wait(start({collective::all_gather, 2 * sizeof(int), 0}, "split"));
    std::vector<detail::group> parts;
    for (const auto& g : groups_) {
      std::map<int, std::vector<std::pair<int, int>>> by_colour;  // colour → (key, position in g)
      for (std::size_t position = 0; position < g.devices.size(); ++position) {
        const int r = g.devices[position];
        const int colour = color_of(r);
        if (colour < 0)
          throw argument_error(r, "cost_only::split", "colour " + std::to_string(colour) + " is negative");
        by_colour[colour].emplace_back(key_of(r), static_cast<int>(position));
      }
      for (auto& [colour, members] : by_colour) {
        std::sort(members.begin(), members.end());
        detail::group part;
        for (const auto& [key, position] : members)
          part.devices.push_back(g.devices[static_cast<std::size_t>(position)]);
        part.id = state_->costs.group_id(part.devices);
        part.last_end.assign(part.devices.size(), 0.0);
        parts.push_back(std::move(part));
      }
    }
    communicator result(state_, std::move(parts));
    // As in sim_gpu: on stream 0 the new groups stay there; on another they get a stream of their own.
    result.stream_ = stream_ == 0 ? 0 : static_cast<int>(state_->stream_ready.size());
    state_->ready(result.stream_);
    return result;
  }

 private:
  template <class T>
  static double bytes(std::size_t count) {
    return static_cast<double>(count * sizeof(T));
  }

  pending start(const collective_shape& shape, const std::string& name = {}) {
    pending result{std::vector<double>(state_->host.size(), 0.0)};
    auto& ready = state_->ready(stream_);
    for (auto& g : groups_) {
      double arrived = 0;
      for (const int r : g.devices)
        arrived = std::max({arrived, state_->host[static_cast<std::size_t>(r)], ready[static_cast<std::size_t>(r)]});
      for (std::size_t m = 0; m < g.devices.size(); ++m) {
        const auto r = static_cast<std::size_t>(g.devices[m]);
        const double begin = std::max(arrived, g.last_end[m]);
        const double end =
            begin + state_->costs.duration_beside(g.id, g.devices, shape, begin, state_->in_flight[r].recent());
        if (shape.bytes > 0) state_->in_flight[r].add({g.id, shape, begin, end});
        g.last_end[m] = end;
        if (state_->trace)
          state_->trace->add({static_cast<int>(r), stream_}, name.empty() ? std::string(name_of(shape.kind)) : name,
                             begin, end - begin);
        ready[r] = std::max(ready[r], end);
        result.ends[r] = end;
      }
    }
    return result;
  }

  std::shared_ptr<detail::clocks> state_;
  std::vector<detail::group> groups_;
  int stream_ = 0;
};

struct report {
  std::vector<double> finish_times;
  std::shared_ptr<const timeline> trace;
  [[nodiscard]] double makespan() const {
    return finish_times.empty() ? 0.0 : *std::max_element(finish_times.begin(), finish_times.end());
  }
};

// Runs body(communicator&) once for all `ranks` GPUs of `machine`; every host waits for its streams
// at the end, as in sim_gpu::run.
template <class Body>
report run(int ranks, machine model, Body&& body) {
  if (model.network.devices() != ranks)
    throw argument_error(-1, "cost_only::run",
                         "the machine's network joins " + std::to_string(model.network.devices()) +
                             " GPUs, the run has " + std::to_string(ranks) + " ranks");
  auto state = std::make_shared<detail::clocks>(ranks, std::move(model));
  detail::group everyone;
  for (int r = 0; r < ranks; ++r) everyone.devices.push_back(r);
  everyone.id = state->costs.group_id(everyone.devices);
  everyone.last_end.assign(everyone.devices.size(), 0.0);
  communicator world(state, {std::move(everyone)});
  body(world);
  world.synchronize();
  return {state->host, state->trace};
}

}  // namespace shardwise::sim::cost_only
