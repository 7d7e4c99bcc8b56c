#pragma once
// Where the training examples (07, 09) go on from, and what they say of it:
// - --resume DIR: the latest checkpoint in DIR, which must hold one, and must leave steps to train.
// - --autoresume: the latest checkpoint in the --checkpoint folder where it holds one, else a fresh
//   start; a checkpoint at the last of --steps ends the run at once, exit status 0. Every job of a chain
//   of batch jobs runs the same command (Megatron-LM's --load of the --save folder, Composer's
//   autoresume), and the job queued after the run's end does nothing and succeeds.
// - neither: a fresh start, which notes a --checkpoint folder that holds checkpoints already; with
//   --init-from DIR, from the weights of DIR's latest checkpoint, with a fresh optimizer from step 1
//   (Megatron-LM's --finetune). --autoresume still goes on from the --checkpoint folder where it
//   holds a checkpoint, so every job of a chain that fine-tunes runs the same command.
// With --eval-only the run takes the checkpoint as it is, and trains, saves and logs nothing.
// A run builds the model of the checkpoint it loads (model_folder()): the checkpoint records the
// model's sizes (record_sizes), and take_recorded_sizes gives them to the options before the ranks start.
//
//   const resume_request resume = resuming(o);                   // o.resume, o.checkpoint, ...
//   const std::string folder = resume.folder(world);             // "" for a fresh start
//   if (const auto done = resume.finished(rank, program, folder, o.steps)) { say(*done); return; }
//   build the model; if (folder.empty() && !o.init_from.empty()) load its weights from o.init_from;
//   build the update; if (folder.empty()) say(resume.fresh_start_note()); else load(folder);
#include <charconv>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <type_traits>

#include "shardwise/comm/communicator.hpp"
#include "shardwise/core/error.hpp"
#include "shardwise/optim/model_checkpoint.hpp"

namespace shardwise::examples {

struct resume_request {
  std::string resume;       // --resume DIR
  std::string checkpoint;   // --checkpoint DIR
  bool autoresume = false;  // --autoresume
  bool eval_only = false;   // --eval-only
  std::string log;          // --log FILE
  std::string init_from;    // --init-from DIR

  // What is wrong with the options, "" for nothing.
  [[nodiscard]] std::string mistake() const {
    if (autoresume && !resume.empty())
      return "--resume DIR and --autoresume both say where the run goes on from: give one";
    if (autoresume && checkpoint.empty())
      return "--autoresume goes on from the --checkpoint folder: give --checkpoint DIR";
    if (eval_only && (!checkpoint.empty() || !log.empty()))
      return "--eval-only trains no step, so it saves and logs none: leave out --checkpoint and --log";
    if (!init_from.empty() && (!resume.empty() || eval_only))
      return "--init-from DIR starts a run that trains a checkpoint's weights with a fresh optimizer from step 1; " +
             std::string(eval_only ? "--eval-only evaluates the --resume DIR checkpoint as it is"
                                   : "--resume DIR goes on with its optimizer state and steps") +
             ": give one";
    return "";
  }

  // The folder the run loads as this process sees it, "" for a fresh start.
  [[nodiscard]] std::string folder() const { return !autoresume ? resume : holds_checkpoint() ? checkpoint : ""; }

  // The folder whose model the run builds, as this process sees it: the one it goes on from, else
  // --init-from's; "" for a fresh model.
  [[nodiscard]] std::string model_folder() const {
    const std::string from = folder();
    return from.empty() ? init_from : from;
  }

  // The same as rank 0 sees it (collective), so that every rank starts alike even where a file system
  // shows the ranks a save at different times.
  template <communicator World>
  [[nodiscard]] std::string folder(World& world) const {
    if (!autoresume) return resume;
    int holds_one = world.rank() == 0 && !folder().empty() ? 1 : 0;
    world.broadcast(std::span<int>(&holds_one, 1), 0);
    return holds_one != 0 ? checkpoint : "";
  }

  // What a fresh start says, "" for nothing.
  [[nodiscard]] std::string fresh_start_note() const {
    if (autoresume) return "note: --autoresume found no checkpoint in " + checkpoint + ": this run starts at step 1\n";
    if (!checkpoint.empty() && holds_checkpoint())
      return "note: " + checkpoint +
             " holds checkpoints already; this run starts afresh, and its first save becomes "
             "their latest\n";
    return "";
  }

  // Before loading `folder` (this process reads its manifest alone) for a run of `steps`: nothing where
  // steps are left, the run only evaluates or starts afresh; what the run says before it ends where
  // --autoresume finds it complete, so that the job after a chain's end builds and loads nothing.
  // Otherwise a checkpoint at or past the end is a mistake (the wrong folder, or --steps), refused for
  // `program` on `rank`.
  [[nodiscard]] std::optional<std::string> finished(int rank, std::string_view program, const std::string& folder,
                                                    long steps) const {
    if (folder.empty() || eval_only) return std::nullopt;
    const long steps_done = optim::read_model_checkpoint_summary(folder).steps;
    if (steps_done < steps) return std::nullopt;
    const std::string at = "the checkpoint in " + folder + " is at step " + std::to_string(steps_done);
    if (autoresume && steps_done == steps)
      return at + ", the last of --steps " + std::to_string(steps) + ": nothing is left to train\n";
    throw argument_error(rank, std::string(program),
                         at + " and --steps is " + std::to_string(steps) + ": nothing is left to train");
  }

  // A run builds the model of the checkpoint it loads, as nanoGPT's resume does: each of `sizes` (a
  // tuple of pairs: an option's name without "--", a pointer to its value) that the checkpoint records
  // takes the recorded value where the command line (`given`) sets none; one set otherwise is refused
  // through `refuse` (the example's usage(problem), which does not return), as is a folder that holds no
  // checkpoint. This process reads the manifest alone, before the ranks start.
  template <class Sizes, class Refuse>
  void take_recorded_sizes(const Sizes& sizes, const std::set<std::string, std::less<>>& given, Refuse refuse) const {
    const std::string from = model_folder();
    if (from.empty()) return;
    std::map<std::string, std::string> saved;
    try {
      saved = optim::read_model_checkpoint_summary(from).metadata;
    } catch (const error& unreadable) {
      refuse(unreadable.detail());  // "no checkpoint at DIR: …", with no call or rank: none has started
    }
    const auto take = [&](std::string_view name, auto& size) {
      const auto recorded = saved.find(std::string(name));
      if (recorded == saved.end()) return;  // saved before checkpoints recorded the sizes
      const std::string flag = "--" + std::string(name);
      const std::string& text = recorded->second;
      std::remove_cvref_t<decltype(size)> value{};
      if (const auto [end, problem] = std::from_chars(text.data(), text.data() + text.size(), value);
          problem != std::errc() || end != text.data() + text.size() || value < 1)
        refuse("the checkpoint in " + from + " records " + flag + " as \"" + text + "\", not a positive whole number");
      if (given.contains(flag) && size != value)
        refuse(flag + " " + std::to_string(size) + " is not the model of " + from + ": it was saved with " + flag +
               " " + text);
      size = value;
    };
    std::apply([&](const auto&... size) { (take(size.first, *size.second), ...); }, sizes);
  }

  // What the line reporting a stop adds: how a run goes on from the step it saved.
  [[nodiscard]] std::string where_a_stopped_run_goes_on() const {
    if (checkpoint.empty()) return " (no --checkpoint: nothing saved)";
    return autoresume ? ": the same command goes on from it" : ": --resume " + checkpoint + " goes on from it";
  }

 private:
  [[nodiscard]] bool holds_checkpoint() const {
    return std::filesystem::exists(std::filesystem::path(checkpoint) / "latest");
  }
};

// The request an example's options make (fields named as the options are).
template <class Options>
[[nodiscard]] resume_request resuming(const Options& o) {
  return {o.resume, o.checkpoint, o.autoresume, o.eval_only, o.log, o.init_from};
}

// The model's `sizes` (as take_recorded_sizes takes them) in a checkpoint's metadata.
template <class Sizes>
void record_sizes(const Sizes& sizes, std::map<std::string, std::string>& metadata) {
  std::apply([&](const auto&... size) { ((metadata[std::string(size.first)] = std::to_string(*size.second)), ...); },
             sizes);
}

}  // namespace shardwise::examples
