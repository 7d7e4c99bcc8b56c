#pragma once
// How a backend's hooks are reached. A backend implements run(call) (blocking) and start(call)
// (non-blocking, returns its request) for every call descriptor (comm/calls.hpp), and keeps them
// private, declaring `friend struct shardwise::detail::backend_hooks;`: user code calls the checked
// collective API of communicator_interface, never a hook. Two kinds of code reach the hooks, through
// this struct: communicator_interface itself, after it has checked the arguments; and a communicator
// that forwards calls it has already checked to another communicator it holds (the sim_gpu backend
// moving its data through a threads::communicator, the wrapping communicators of tests/support).
namespace shardwise::detail {

struct backend_hooks {
  template <class Backend, class Call>
  static void run(Backend& backend, const Call& call) {
    backend.run(call);
  }
  template <class Backend, class Call>
  [[nodiscard]] static auto start(Backend& backend, const Call& call) {
    return backend.start(call);
  }
};

}  // namespace shardwise::detail
