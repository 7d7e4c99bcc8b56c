#pragma once
// A communicator that counts the collectives issued through it, by name, and forwards each to the
// communicator it wraps (any backend); and the kernels launched through it (core/kernel.hpp), which it
// runs, or launches on the communicator it wraps where that launches kernels. For tests that promise a
// number of calls, e.g. that many small tensors share one collective, or that a collective reads a
// tensor where it is, with no copy.
#include <map>
#include <string>
#include <string_view>
#include <utility>

#include "shardwise/comm/communicator.hpp"
#include "shardwise/comm/detail/backend_hooks.hpp"
#include "shardwise/core/kernel.hpp"
#include "shardwise/core/work.hpp"

namespace shardwise::testing {

template <communicator Inner>
class counting_communicator : public communicator_interface<counting_communicator<Inner>> {
 public:
  using request = typename Inner::request;

  explicit counting_communicator(Inner inner) : inner_(std::move(inner)) {}

  [[nodiscard]] int rank() const { return inner_.rank(); }
  [[nodiscard]] int size() const { return inner_.size(); }
  [[nodiscard]] int world_rank() const { return inner_.world_rank(); }
  [[nodiscard]] counting_communicator split(int color, int key) {
    return counting_communicator(inner_.split(color, key));
  }

  // Collectives named `name` ("all_reduce", "reduce_scatter", …) issued so far.
  [[nodiscard]] int calls(std::string_view name) const { return count_of(calls_, name); }
  [[nodiscard]] int total_calls() const {
    int total = 0;
    for (const auto& [name, count] : calls_) total += count;
    return total;
  }
  // Kernels named `name` ("redistribute copy", …) launched so far.
  [[nodiscard]] int kernels(std::string_view name) const { return count_of(kernels_, name); }
  void reset() {
    calls_.clear();
    kernels_.clear();
  }

  template <class Compute>
  void launch(const work& w, Compute&& compute, const std::string& name) {
    ++kernels_[name];
    if constexpr (launches_kernels<Inner>) {
      inner_.launch(w, std::forward<Compute>(compute), name);
    } else {
      std::forward<Compute>(compute)();
    }
  }

 private:
  static int count_of(const std::map<std::string, int>& counts, std::string_view name) {
    const auto found = counts.find(std::string(name));
    return found == counts.end() ? 0 : found->second;
  }

  // Backend hooks: the interface has checked the arguments already, so they go straight to the inner
  // communicator's hooks (comm/detail/backend_hooks.hpp).
  friend struct shardwise::detail::backend_hooks;
  template <class Call>
  void run(const Call& call) {
    ++calls_[std::string(Call::name)];
    shardwise::detail::backend_hooks::run(inner_, call);
  }
  template <class Call>
  [[nodiscard]] request start(const Call& call) {
    ++calls_[std::string(Call::name)];
    return shardwise::detail::backend_hooks::start(inner_, call);
  }

  Inner inner_;
  std::map<std::string, int> calls_;
  std::map<std::string, int> kernels_;
};

}  // namespace shardwise::testing
