#pragma once
// A communicator that counts the collectives issued through it, by name, and forwards each to the
// communicator it wraps (any backend). For tests that promise a number of calls, e.g. that many small
// tensors share one collective.
#include <map>
#include <string>
#include <string_view>
#include <utility>

#include "shardwise/comm/communicator.hpp"

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

  // Backend hooks: the interface has checked the arguments already.
  template <class Call>
  void run(const Call& call) {
    ++calls_[std::string(Call::name)];
    inner_.run(call);
  }
  template <class Call>
  [[nodiscard]] request start(const Call& call) {
    ++calls_[std::string(Call::name)];
    return inner_.start(call);
  }

  // Collectives named `name` ("all_reduce", "reduce_scatter", …) issued so far.
  [[nodiscard]] int calls(std::string_view name) const {
    const auto found = calls_.find(std::string(name));
    return found == calls_.end() ? 0 : found->second;
  }
  [[nodiscard]] int total_calls() const {
    int total = 0;
    for (const auto& [name, count] : calls_) total += count;
    return total;
  }
  void reset() { calls_.clear(); }

 private:
  Inner inner_;
  std::map<std::string, int> calls_;
};

}  // namespace shardwise::testing
