#pragma once
// A communicator that forwards every call to the communicator it wraps (any backend), except the first
// collective named `failing_call` ("all_to_all_v", "reduce_scatter", …) that world rank `failing_rank`
// issues through it or through any communicator split from it: that one throws shardwise::error
// "injected fault" instead. A fault inside a library call, for tests of how errors travel.
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "shardwise/comm/communicator.hpp"
#include "shardwise/comm/detail/backend_hooks.hpp"
#include "shardwise/core/error.hpp"

namespace shardwise::testing {

template <communicator Inner>
class faulty_communicator : public communicator_interface<faulty_communicator<Inner>> {
 public:
  using request = typename Inner::request;

  faulty_communicator(Inner inner, int failing_rank, std::string_view failing_call)
      : faulty_communicator(std::move(inner),
                            std::make_shared<fault>(fault{failing_rank, std::string(failing_call), false})) {}

  [[nodiscard]] int rank() const { return inner_.rank(); }
  [[nodiscard]] int size() const { return inner_.size(); }
  [[nodiscard]] int world_rank() const { return inner_.world_rank(); }
  [[nodiscard]] faulty_communicator split(int color, int key) {
    return faulty_communicator(inner_.split(color, key), fault_);
  }

 private:
  // Backend hooks: the interface has checked the arguments already, so they go straight to the inner
  // communicator's hooks (comm/detail/backend_hooks.hpp).
  friend struct shardwise::detail::backend_hooks;
  template <class Call>
  void run(const Call& call) {
    strike(Call::name);
    shardwise::detail::backend_hooks::run(inner_, call);
  }
  template <class Call>
  [[nodiscard]] request start(const Call& call) {
    strike(Call::name);
    return shardwise::detail::backend_hooks::start(inner_, call);
  }

  struct fault {
    int rank;
    std::string call;
    bool struck;
  };
  faulty_communicator(Inner inner, std::shared_ptr<fault> plan) : inner_(std::move(inner)), fault_(std::move(plan)) {}

  void strike(std::string_view call) {
    if (fault_->struck || world_rank() != fault_->rank || call != fault_->call) return;
    fault_->struck = true;
    throw error(world_rank(), call, "injected fault");
  }

  Inner inner_;
  std::shared_ptr<fault> fault_;  // shared with the communicators split from this one
};

}  // namespace shardwise::testing
