#pragma once
// How the training examples (07, 09) stop on Ctrl-C: the first SIGINT or SIGTERM (which mpiexec sends
// its processes) lets every rank finish the step it is in, and save it where the run checkpoints; a
// second ends the program at once.
//
//   stop_on_signals();                              // in main, before the ranks start
//   loop: …; if (const int s = signal_on_any_rank(world)) { save; break; }
//   return exit_code_after_signal();                // 128 + the signal, as a shell reports one
#include <atomic>
#include <csignal>
#include <span>
#include <string>

#include "shardwise/comm/communicator.hpp"
#include "shardwise/comm/reduction.hpp"

namespace shardwise::examples {

// The signal that asked the run to stop, 0 until one does: one object for the program, which may
// compile an example into two objects (07's MPI backend), as an inline function's static.
inline std::atomic<int>& stop_signal() {
  static std::atomic<int> signal{0};
  return signal;
}

inline void stop_after_this_step(int signal) {
  stop_signal().store(signal);
  std::signal(signal, SIG_DFL);
}

inline void stop_on_signals() {
  std::signal(SIGINT, stop_after_this_step);
  std::signal(SIGTERM, stop_after_this_step);
}

// The signal any rank of `world` received, 0 for none (collective): every rank stops after the same step.
template <communicator World>
int signal_on_any_rank(World& world) {
  int signal = stop_signal().load();
  world.all_reduce(std::span<int>(&signal, 1), op::max);
  return signal;
}

// What the line reporting a stop adds: the --checkpoint folder a --resume goes on from, if any.
inline std::string where_a_stopped_run_goes_on(const std::string& checkpoint) {
  return checkpoint.empty() ? " (no --checkpoint: nothing saved)" : ": --resume " + checkpoint + " goes on from it";
}

inline int exit_code_after_signal() {
  const int signal = stop_signal().load();
  return signal != 0 ? 128 + signal : 0;
}

}  // namespace shardwise::examples
