#pragma once
// What the fused embedding operator (fused/embedding_all_to_all.hpp) asks of the machine it runs on: a
// backend. The operator is written once against this concept; a backend says how a slice reaches each
// peer and what the kernels cost, and plugs in without a change to the operator.
//
//   data_communicator()   the communicator that moves the data (on a simulated machine, its untimed
//                         twin: the backend accounts for the time itself)
//   group_of(peer)        the lowest rank whose memory `peer` shares: the operator keeps its buffers in
//                         one symmetric window per group (fused/primitives.hpp)
//   delivery_to(peer)     how a slice for `peer` travels: stored straight into its buffer, put into it
//                         from a staging buffer (a GPU-initiated put to another node), or sent as a
//                         message
//   machine()             the machine model the automatic choices consult, or null (then the operator
//                         measures)
//   models_time           whether the kernels below take modelled time; if not, they cost nothing
//   kernel(tasks) … end_kernel(kernel, name)     an ordinary kernel of `tasks` logical workgroups, each
//                         task declared with run_task(work, label)
//   launch(work, name, body)  a kernel doing `work` (unpacking a received block), whose data movement
//                         is `body`: run on ranks that store values, skipped in shapes-only runs
//   fused_kernel(plan) … end_fused_kernel(kernel) the fused persistent kernel, told each task in the
//                         plan's order (task(slice, task, lookups)); its end waits for every rank's
//                         slices
//   fused_backward_kernel(plan) … end_fused_kernel(kernel)  the fused backward kernel, told each slice
//                         it sends (send(slice)) and each bag's gradient it adds (add(table, source,
//                         flag, lookups)) in the plan's orders
//
// host_backend serves every communicator that runs on CPUs (threads, MPI): ranks that share memory
// (comm/shared_memory.hpp) store into each other's buffers, the others exchange messages, and the
// kernels take no modelled time. Simulated GPUs have theirs in fused/embedding_modelled_backend.hpp.
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "shardwise/comm/communicator.hpp"
#include "shardwise/core/error.hpp"
#include "shardwise/fused/embedding_options.hpp"
#include "shardwise/fused/embedding_plan.hpp"
#include "shardwise/fused/primitives.hpp"
#include "shardwise/sim/device_model.hpp"
#include "shardwise/sim/machine.hpp"

namespace shardwise::fused {

// How a slice reaches its destination.
enum class delivery { store, put, message };

template <class B>
concept embedding_backend =
    requires(B& backend, const B& view, int peer, const embedding_plan& plan, const shardwise::work& work,
             const std::string& name, void (*body)()) {
      typename B::communicator_type;
      typename B::data_communicator_type;
      { B::models_time } -> std::convertible_to<bool>;
      { backend.data_communicator() } -> std::same_as<typename B::data_communicator_type&>;
      { view.world_rank() } -> std::convertible_to<int>;
      { view.group_of(peer) } -> std::convertible_to<int>;
      { view.delivery_to(peer) } -> std::same_as<delivery>;
      { view.machine() } -> std::same_as<const sim::machine*>;
      backend.launch(work, name, body);
    } &&
    requires(B& backend, decltype(std::declval<B&>().kernel(std::int64_t{})) kernel, const shardwise::work& work,
             const std::string& name) {
      kernel.run_task(work, name);
      backend.end_kernel(kernel, name);
    } &&
    requires(B& backend, decltype(std::declval<B&>().fused_kernel(std::declval<const embedding_plan&>())) kernel,
             const embedding_slice& slice, std::int64_t task) {
      kernel.task(slice, task, task);
      backend.end_fused_kernel(kernel);
    } &&
    requires(B& backend,
             decltype(std::declval<B&>().fused_backward_kernel(std::declval<const embedding_plan&>())) kernel,
             const embedding_slice& slice, int table, std::size_t flag, std::int64_t lookups) {
      kernel.send(slice);
      kernel.add(table, table, flag, lookups);
      backend.end_fused_kernel(kernel);
    };

// A kernel that takes no modelled time.
struct untimed_kernel {
  void run_task(const work&, std::string_view = {}) const noexcept {}
  void task(const embedding_slice&, std::int64_t, std::int64_t) const noexcept {}
  void send(const embedding_slice&) const noexcept {}
  void add(int, int, std::size_t, std::int64_t) const noexcept {}
};

template <communicator Comm>
class host_backend {
 public:
  using communicator_type = Comm;
  using data_communicator_type = Comm;
  static constexpr bool models_time = false;

  // Collective (it asks which ranks share memory).
  host_backend(Comm& comm, const embedding_options& options)
      : comm_(&comm), machine_(options.machine), groups_(groups_of(comm, options)) {
    if (machine_ && machine_->network.devices() < comm.size())
      throw argument_error(comm.world_rank(), "embedding_all_to_all",
                           "options.machine models " + std::to_string(machine_->network.devices()) +
                               " devices, fewer than the communicator's " + std::to_string(comm.size()) + " ranks");
  }

  [[nodiscard]] Comm& data_communicator() const noexcept { return *comm_; }
  [[nodiscard]] int world_rank() const { return comm_->world_rank(); }
  [[nodiscard]] int group_of(int peer) const { return groups_[static_cast<std::size_t>(peer)]; }
  [[nodiscard]] delivery delivery_to(int peer) const {
    return group_of(peer) == group_of(comm_->rank()) ? delivery::store : delivery::message;
  }
  [[nodiscard]] const sim::machine* machine() const noexcept { return machine_ ? &*machine_ : nullptr; }

  [[nodiscard]] untimed_kernel kernel(std::int64_t) const noexcept { return {}; }
  void end_kernel(const untimed_kernel&, const std::string&) const noexcept {}
  template <class Body>
  void launch(const work&, const std::string&, Body&& body) const {
    std::forward<Body>(body)();
  }
  [[nodiscard]] untimed_kernel fused_kernel(const embedding_plan&) const noexcept { return {}; }
  [[nodiscard]] untimed_kernel fused_backward_kernel(const embedding_plan&) const noexcept { return {}; }
  void end_fused_kernel(const untimed_kernel&) const noexcept {}

 private:
  // Per rank, the lowest rank of the ranks whose memory it shares, cut into groups of
  // options.ranks_per_node consecutive ranks when that is more than 0; each rank alone without
  // options.share_memory (collective).
  static std::vector<int> groups_of(Comm& comm, const embedding_options& options) {
    const int P = comm.size(), k = options.ranks_per_node;
    if (k < 0)
      throw argument_error(comm.world_rank(), "embedding_all_to_all",
                           "ranks_per_node is " + std::to_string(k) + "; it must be 0 (the backend's nodes) or more");
    std::vector<int> groups(static_cast<std::size_t>(P));
    if (!options.share_memory) {
      for (int p = 0; p < P; ++p) groups[static_cast<std::size_t>(p)] = p;
      return groups;
    }
    const auto memory = shared_memory_groups_of(comm);
    const auto with = [&](int p, int q) {
      return memory[static_cast<std::size_t>(p)] == memory[static_cast<std::size_t>(q)] && (k == 0 || p / k == q / k);
    };
    for (int p = 0; p < P; ++p) {
      int first = 0;
      while (!with(first, p)) ++first;
      groups[static_cast<std::size_t>(p)] = first;
    }
    return groups;
  }

  Comm* comm_;
  std::optional<sim::machine> machine_;
  std::vector<int> groups_;
};

// The backend the operator takes for a communicator unless told otherwise: host_backend, or a more
// specific one where a header declares it (fused/embedding_modelled_backend.hpp).
template <class Comm>
struct default_embedding_backend {
  using type = host_backend<Comm>;
};
template <class Comm>
using default_embedding_backend_t = typename default_embedding_backend<Comm>::type;

}  // namespace shardwise::fused
