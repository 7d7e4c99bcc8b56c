#pragma once
// The embedding backend of simulated GPUs (sim/sim_gpu.hpp): the data move for real, through one
// symmetric window over every rank, and the time is the models': a persistent kernel on the
// communicator's stream whose puts and flags share the network (fused/embedding_cost.hpp). Peers in
// another node get a slice by a put from a staging buffer, peers in the node by zero-copy stores; the
// timeline has workgroup and link tracks.
//
// It serves any communicator that drives modelled devices (modelled_communicator below), and is the
// default embedding backend of those (fused/embedding_backend.hpp).
#include <algorithm>
#include <concepts>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "shardwise/comm/communicator.hpp"
#include "shardwise/comm/computed_on_root.hpp"
#include "shardwise/core/element_memory.hpp"
#include "shardwise/core/error.hpp"
#include "shardwise/fused/embedding_backend.hpp"
#include "shardwise/fused/embedding_cost.hpp"
#include "shardwise/fused/embedding_options.hpp"
#include "shardwise/fused/primitives.hpp"
#include "shardwise/sim/device.hpp"
#include "shardwise/sim/machine.hpp"
#include "shardwise/sim/timeline.hpp"

namespace shardwise::fused {

// A communicator of simulated GPUs: its machine, the stream its calls take time on, the run's
// timeline, and an untimed twin that moves data without taking time.
template <class Comm>
concept modelled_communicator = communicator<Comm> && requires(Comm& comm) {
  { comm.machine() } -> std::convertible_to<const sim::machine&>;
  { comm.stream() } -> std::convertible_to<sim::stream&>;
  { comm.timeline() } -> std::convertible_to<sim::timeline*>;
  requires communicator<std::remove_cvref_t<decltype(comm.untimed())>>;
};

template <modelled_communicator Comm>
class modelled_backend {
 public:
  using communicator_type = Comm;
  using data_communicator_type = std::remove_reference_t<decltype(std::declval<Comm&>().untimed())>;
  static constexpr bool models_time = true;

  // Collective (it learns every rank's device).
  modelled_backend(Comm& comm, const embedding_options& options) : comm_(&comm), gpu_initiated_(options.gpu_initiated) {
    if (options.ranks_per_node != 0)
      throw argument_error(comm.world_rank(), "embedding_all_to_all",
                           "ranks_per_node is " + std::to_string(options.ranks_per_node) +
                               "; on sim_gpu the machine model says where the nodes are, so it must be 0");
    devices_.resize(static_cast<std::size_t>(comm.size()));
    const int mine = comm.world_rank();
    data_communicator().all_gather(std::span<const int>(&mine, 1), devices_);
  }

  [[nodiscard]] data_communicator_type& data_communicator() const { return comm_->untimed(); }
  [[nodiscard]] int world_rank() const { return comm_->world_rank(); }
  // One window over every rank: its puts to other nodes are modelled, its data shared.
  [[nodiscard]] int group_of(int) const noexcept { return 0; }
  [[nodiscard]] delivery delivery_to(int peer) const {
    return crosses_nodes(comm_->machine().network, devices_[static_cast<std::size_t>(comm_->rank())],
                         devices_[static_cast<std::size_t>(peer)])
               ? delivery::put
               : delivery::store;
  }
  [[nodiscard]] const sim::machine* machine() const { return &comm_->machine(); }

  // An ordinary kernel: one logical workgroup per task on min(tasks, resident) workgroups.
  struct timed_kernel {
    persistent_kernel model;
    double start;
    void run_task(const work& w, const std::string& label = "task") { model.run_task(w, label); }
  };
  [[nodiscard]] timed_kernel kernel(std::int64_t tasks) const {
    const double start = comm_->stream().available();
    const auto workgroups = static_cast<int>(std::min<std::int64_t>(tasks, gpu_initiated_.resident_workgroups));
    return {persistent_kernel(comm_->world_rank(), comm_->machine().device, gpu_initiated_, workgroups,
                              start + comm_->machine().device.launch_latency),
            start};
  }
  // The host waits for the kernel: its results are what the call returns (the backward's last kernels
  // leave the gradients the optimizer reads next).
  void end_kernel(timed_kernel& kernel, const std::string& name) const {
    comm_->stream().occupy(name, kernel.start, kernel.model.finish({}, {}));
    comm_->stream().synchronize();
  }
  template <class Body>
  void launch(const work& w, const std::string& name, Body&& body) const {
    if (element_memory::stored_on_this_thread()) std::forward<Body>(body)();
    comm_->stream().launch(w, name);
    comm_->stream().synchronize();
  }

  [[nodiscard]] fused_kernel_model fused_kernel(const embedding_plan& plan) const {
    return fused_kernel_model(plan, comm_->world_rank(), comm_->machine(), gpu_initiated_, comm_->stream().available(),
                              comm_->timeline());
  }
  [[nodiscard]] fused_backward_model fused_backward_kernel(const embedding_plan& plan) const {
    return fused_backward_model(plan, comm_->world_rank(), comm_->machine(), gpu_initiated_,
                                comm_->stream().available(), comm_->timeline());
  }
  // The kernels hold the plan by reference: a temporary one would be gone before they use it.
  fused_kernel_model fused_kernel(const embedding_plan&&) const = delete;             // name the plan in a variable
  fused_backward_model fused_backward_kernel(const embedding_plan&&) const = delete;  // name the plan in a variable
  // Every rank's messages to every rank (untimed), delivered together; the kernel holds the stream
  // until its end and the host waits for it, as the baseline's blocking all-to-all does.
  template <class Kernel>
  void end_fused_kernel(Kernel& model) {
    constexpr std::size_t fields = 7;
    std::vector<double> mine;
    for (const auto& m : model.kernel().messages())
      mine.insert(mine.end(), {static_cast<double>(m.sent.source), static_cast<double>(m.sent.destination),
                               m.sent.bytes, m.sent.issued, static_cast<double>(m.workgroup),
                               static_cast<double>(m.fences_before), static_cast<double>(m.flag)});
    auto& data = data_communicator();
    const int P = data.size();
    const int count = static_cast<int>(mine.size());
    std::vector<int> counts(static_cast<std::size_t>(P));
    data.all_gather(std::span<const int>(&count, 1), counts);
    std::vector<double> repeated;
    for (int p = 0; p < P; ++p) repeated.insert(repeated.end(), mine.begin(), mine.end());
    std::size_t total = 0;
    for (const int c : counts) total += static_cast<std::size_t>(c);
    std::vector<double> everyone(total);
    data.all_to_all_v(repeated, std::vector<int>(static_cast<std::size_t>(P), count), everyone, counts);
    std::vector<gpu_message> all;
    for (std::size_t i = 0; i < everyone.size(); i += fields)
      all.push_back(
          {{static_cast<int>(everyone[i]), static_cast<int>(everyone[i + 1]), everyone[i + 2], everyone[i + 3]},
           static_cast<int>(everyone[i + 4]),
           static_cast<int>(everyone[i + 5]),
           static_cast<std::int64_t>(everyone[i + 6])});
    // Every rank needs the same arrivals: rank 0 works them out (drawing the links) and broadcasts them,
    // since P ranks each delivering all P ranks' messages would cost P times the simulation.
    const auto arrivals = computed_on_root<double>(data, 0, all.size(), "embedding_all_to_all", [&] {
      return deliver_all(comm_->machine().network, all, gpu_initiated_.message_overhead, comm_->timeline());
    });
    const double start = comm_->stream().available();
    const double end = model.finish(all, arrivals);
    comm_->stream().occupy(model.name(), start, end, [&]() -> sim::event_details {
      return {{"slice rows", std::to_string(model.plan().slice_rows())},
              {"order", std::string(name_of(model.plan().order()))}};
    });
    comm_->stream().synchronize();
  }

 private:
  Comm* comm_;
  sim::gpu_initiated_model gpu_initiated_;
  std::vector<int> devices_;  // device (world rank) of each rank
};

template <modelled_communicator Comm>
struct default_embedding_backend<Comm> {
  using type = modelled_backend<Comm>;
};

}  // namespace shardwise::fused
