#pragma once
// How the training examples (07, 09) stop before their last step: every rank after the same step (the
// ranks agree in one all-reduce a step), saving it where the run checkpoints, so that --resume goes on
// from it.
// - Ctrl-C: the first SIGINT or SIGTERM (which mpiexec and batch schedulers send before they kill) lets
//   every rank finish the step it is in; a second ends the program at once. Exit status 128 + signal.
// - --stop-at-step N: after step N of a run of --steps, whose learning-rate schedule it keeps (a shorter
//   --steps would change it). Exit status 0.
// - --stop-after-minutes M: after the first step at which one more, as long as the longest so far, could
//   pass M minutes from the start of train(); a job's time limit less the time of a save. Exit status 0.
//
//   stop_on_signals();                                   // in main, before the ranks start
//   early_stop stop{o.steps, o.stop_at_step, o.stop_after_minutes, started};   // just before the loop
//   loop: …; if (stop.after(world, step)) { save; say(stop.reason()); break; }
//   return exit_code_after_signal();
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
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

class early_stop {
  using clock = std::chrono::steady_clock;

 public:
  // A run of `steps` steps; `at_step` and `after_minutes` 0: no such stop. `started`: when the time
  // limit's minutes began.
  early_stop(long steps, long at_step, double after_minutes, clock::time_point started)
      : steps_(steps),
        at_step_(at_step),
        after_minutes_(after_minutes),
        started_(started),
        last_step_end_(clock::now()) {}

  // Whether the run stops after `step`, as any rank asks (collective); its last step ends it anyway, as
  // planned. A step's time is all of it between two calls: evaluation, progress lines and saves included.
  template <communicator World>
  bool after(World& world, long step) {
    const auto now = clock::now();
    longest_step_ = std::max(longest_step_, now - last_step_end_);
    last_step_end_ = now;
    minutes_ = std::chrono::duration<double, std::ratio<60>>(now - started_).count();
    const double next_step_minutes = std::chrono::duration<double, std::ratio<60>>(longest_step_).count();
    const bool steps_left = step < steps_;
    std::array<int, 3> asked{stop_signal().load(), steps_left && step == at_step_,
                             steps_left && after_minutes_ > 0 && minutes_ + next_step_minutes >= after_minutes_};
    world.all_reduce(std::span<int>(asked), op::max);
    signal_ = asked[0];
    at_step_reached_ = asked[1] != 0;
    out_of_time_ = asked[2] != 0;
    step_ = step;
    return signal_ != 0 || at_step_reached_ || out_of_time_;
  }

  // What is wrong with the stops asked of a run that starts at `first_step`, "" for nothing: a
  // --stop-at-step it never reaches.
  [[nodiscard]] std::string mistake(long first_step) const {
    const std::string asked = "--stop-at-step " + std::to_string(at_step_);
    if (at_step_ == 0 || (first_step <= at_step_ && at_step_ < steps_)) return "";
    if (at_step_ >= steps_) return asked + " is not before --steps " + std::to_string(steps_) + ", where the run ends";
    return asked + " is before step " + std::to_string(first_step) + ", where this run goes on from its checkpoint";
  }

  // The time this run has left after `step`, at `seconds_per_step`: to its last step, the step
  // --stop-at-step names, or its time limit, whichever comes first.
  [[nodiscard]] double seconds_left(long step, double seconds_per_step) const {
    const long last = at_step_ > step ? std::min(steps_, at_step_) : steps_;
    double left = static_cast<double>(last - step) * seconds_per_step;
    if (after_minutes_ > 0) {
      const double elapsed = std::chrono::duration<double>(clock::now() - started_).count();
      left = std::min(left, std::max(0.0, 60 * after_minutes_ - elapsed));
    }
    return left;
  }

  // Why the run stopped, after `after` said it does: "stopped by signal 2 after step 731".
  [[nodiscard]] std::string reason() const {
    char text[160];
    if (signal_ != 0) std::snprintf(text, sizeof text, "stopped by signal %d after step %ld", signal_, step_);
    else if (at_step_reached_)
      std::snprintf(text, sizeof text, "stopped after step %ld, as --stop-at-step asks", step_);
    else
      std::snprintf(text, sizeof text,
                    "stopped after step %ld, %.2f minutes in, as one more could pass --stop-after-minutes %g", step_,
                    minutes_, after_minutes_);
    return text;
  }

 private:
  long steps_, at_step_;
  double after_minutes_;
  clock::time_point started_, last_step_end_;
  clock::duration longest_step_{};
  double minutes_ = 0;
  int signal_ = 0;
  bool at_step_reached_ = false, out_of_time_ = false;
  long step_ = 0;
};

// 128 + the signal that stopped the run, as a shell reports one; 0 where none did.
inline int exit_code_after_signal() {
  const int signal = stop_signal().load();
  return signal != 0 ? 128 + signal : 0;
}

}  // namespace shardwise::examples
