// Saves killed at every point where they change the disk (the fault points of
// optim/checkpoint_files.hpp). A child process, checkpoint_kill_save (on threads, or P processes under
// mpiexec), saves a checkpoint into a folder holding earlier ones and sends itself SIGKILL at its K-th
// fault point, for K = 1, 2, ... until a save completes; under MPI the rank that dies is each one of
// --kill-ranks in turn. After each kill:
//   - the checkpoint `latest` named before loads bit-exact, through `latest` or its folder;
//   - `latest` names either it or the new checkpoint, complete;
//   - every folder called step-N loads bit-exact one of the states saved as step N;
//   - the next save, unarmed, removes what the killed one left, commits, and keeps the newest two.
// Two scenarios, for both checkpoint kinds: a new step (steps 1 and 2 saved, step 3 killed) and the
// same step again (steps 2 and 3 saved, step 3 with other values killed). Each kill is printed with
// its point and outcome, then the counts.
//
//   checkpoint_kill_test [GoogleTest flags] --backend threads|mpi --ranks P... --kill-ranks R... -- COMMAND...
// COMMAND starts the saving program (checkpoint_kill_save, or mpiexec -n P ... checkpoint_kill_save);
// the test appends the save's arguments. Loads and unarmed saves run in this process, on P threads.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "shardwise/comm/threads.hpp"
#include "support/checkpoint_states.hpp"
#include "support/files.hpp"

namespace {

namespace fs = std::filesystem;
using namespace shardwise::testing;

std::string backend;  // of the saving program: threads (one process) or mpi (a process a rank)
std::vector<int> rank_counts;
std::vector<int> kill_ranks;
std::vector<std::string> save_command;

// A saved state: its step and the seed of its values.
struct saved {
  long step = 0;
  int seed = 0;
};

struct scenario {
  const char* name;
  std::vector<saved> before;  // saved in order; `latest` names the last
  saved killed;               // the save the child dies in
};

const std::vector<scenario> scenarios = {
    {"a new step", {{1, 0}, {2, 0}}, {3, 0}},
    {"the same step again", {{2, 0}, {3, 0}}, {3, 1}},
};

// How a child ended: killed at a point (its description), completed, or failed.
struct child_end {
  bool killed = false;
  bool completed = false;
  std::string point;
  std::string log;
};

// Runs the saving program with `arguments` appended; its output goes to `log`. Gives up (and fails)
// after two minutes, killing the child's process group.
child_end run_save(const std::vector<std::string>& arguments, const fs::path& record, const fs::path& log) {
  std::vector<std::string> words = save_command;
  words.insert(words.end(), arguments.begin(), arguments.end());
  words.insert(words.end(), {"--backend", backend});
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  std::fflush(nullptr);  // else the child's freopen writes this process's buffered output a second time
  const pid_t child = ::fork();
  if (child == 0) {
    ::setpgid(0, 0);
    std::FILE* out = std::freopen(log.c_str(), "w", stdout);
    if (out == nullptr || ::dup2(::fileno(stdout), 2) < 0) ::_exit(126);
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  while (::waitpid(child, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(-child, SIGKILL);
      ::waitpid(child, &status, 0);
      return {false, false, "", "the save hung; killed after two minutes\n" + file_text(log)};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  child_end end;
  end.point = file_text(record);
  if (!end.point.empty()) end.point.pop_back();  // the newline
  const bool succeeded = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  // On threads the process itself dies of SIGKILL; mpiexec reports its rank's death by its status.
  end.killed =
      !end.point.empty() && (backend == "mpi" ? !succeeded : WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  end.completed = end.point.empty() && succeeded;
  end.log = file_text(log);
  return end;
}

// What a load gave: the index of the candidate state it equals bit for bit, or -1 and why.
struct load_result {
  int index = -1;
  std::string why;
};

// Loads `path` on `ranks` threads and compares with each candidate (every rank compares with every
// one, so that the collectives match); rank 0's result.
template <template <class> class State>
load_result loads_as(int ranks, const fs::path& path, const std::vector<saved>& candidates) {
  load_result result;
  shardwise::threads::run(ranks, [&](auto& world) {
    State<std::remove_cvref_t<decltype(world)>> state(world);
    load_result mine;
    try {
      state.load(path);
    } catch (const shardwise::error& e) {
      mine.why = e.what();
    }
    std::int32_t failed = mine.why.empty() ? 0 : 1;
    world.all_reduce(std::span<std::int32_t>(&failed, 1));
    if (failed == 0) {
      for (std::size_t c = 0; c < candidates.size(); ++c)
        if (state.differences(candidates[c].step, candidates[c].seed).empty() && mine.index < 0)
          mine.index = static_cast<int>(c);
      if (mine.index < 0) mine.why = "it loads none of the states saved as its step";
    } else if (mine.why.empty()) {
      mine.why = "another rank could not load it";
    }
    if (world.rank() == 0) result = mine;
  });
  return result;
}

template <template <class> class State>
void save_in_process(int ranks, const fs::path& directory, saved what) {
  shardwise::threads::run(ranks, [&](auto& world) {
    State<std::remove_cvref_t<decltype(world)>> state(world);
    state.set(what.step, what.seed);
    state.save(directory);
  });
}

struct tally {
  int kills = 0;
  int latest_previous = 0;
  int latest_new = 0;
  int leftovers = 0;
};

// Kills the scenario's save at each fault point of `kill_rank`; checks and prints each outcome.
template <template <class> class State>
void kill_at_every_point(const char* kind, const scenario& s, int ranks, int kill_rank, const fs::path& root,
                         tally& total) {
  const std::string label = std::string(kind) + ", " + s.name + ", " + std::to_string(ranks) + " ranks, " +
                            (backend == "mpi" ? "rank " + std::to_string(kill_rank) : "the process") + " killed";
  SCOPED_TRACE(label);
  const saved previous = s.before.back();
  int points = 0;
  for (int k = 1;; ++k) {
    const fs::path directory = root / ("save-" + std::to_string(k));
    fs::remove_all(directory);
    for (const saved& b : s.before) save_in_process<State>(ranks, directory, b);
    const fs::path record = root / "record", log = root / "log";
    fs::remove(record);
    const child_end end =
        run_save({"--kind", kind, "--ranks", std::to_string(ranks), "--step", std::to_string(s.killed.step), "--seed",
                  std::to_string(s.killed.seed), "--directory", directory.string(), "--kill-at", std::to_string(k),
                  "--kill-rank", std::to_string(kill_rank), "--record", record.string()},
                 record, log);
    if (end.completed) break;
    if (!end.killed) {
      ADD_FAILURE() << "the save neither died at point " << k << " nor completed:\n" << end.log;
      break;
    }
    ++points;

    // Every step folder loads exactly a state saved as its step; latest names one of them.
    std::string leftovers;
    for (const auto& entry : fs::directory_iterator(directory)) {
      const std::string name = entry.path().filename().string();
      if (name.ends_with(".tmp")) leftovers += " " + name;
      if (!name.starts_with("step-") || name.ends_with(".tmp")) continue;
      const long step = std::stol(name.substr(5));
      std::vector<saved> candidates;
      for (const saved& b : s.before)
        if (b.step == step) candidates.push_back(b);
      if (s.killed.step == step) candidates.push_back(s.killed);
      const load_result folder = loads_as<State>(ranks, entry.path(), candidates);
      EXPECT_GE(folder.index, 0) << name << " after a kill at \"" << end.point << "\": " << folder.why;
    }
    const load_result latest = loads_as<State>(ranks, directory, {previous, s.killed});
    EXPECT_GE(latest.index, 0) << "latest after a kill at \"" << end.point << "\": " << latest.why;
    if (previous.step != s.killed.step) {
      const load_result kept =
          loads_as<State>(ranks, directory / ("step-" + std::to_string(previous.step)), {previous});
      EXPECT_EQ(kept.index, 0) << "the previous checkpoint after a kill at \"" << end.point << "\": " << kept.why;
    }
    std::string point = end.point;
    for (std::size_t at; (at = point.find(directory.string() + "/")) != std::string::npos;)
      point.erase(at, directory.string().size() + 1);
    const char* outcome = latest.index == 1   ? "latest loads the new checkpoint"
                          : latest.index == 0 ? "latest loads the previous checkpoint"
                                              : "latest loads nothing";
    std::printf("  %s: killed at point %d, before \"%s\": %s%s%s\n", label.c_str(), k, point.c_str(), outcome,
                leftovers.empty() ? "" : "; left:", leftovers.c_str());
    ++total.kills;
    (latest.index == 1 ? total.latest_new : total.latest_previous) += 1;
    total.leftovers += leftovers.empty() ? 0 : 1;

    // The next save cleans up and commits.
    save_in_process<State>(ranks, directory, s.killed);
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(directory)) names.push_back(entry.path().filename().string());
    std::ranges::sort(names);
    long kept = 0;  // the newest step saved before, other than the one saved again
    for (const saved& b : s.before)
      if (b.step != s.killed.step) kept = std::max(kept, b.step);
    EXPECT_EQ(names, (std::vector<std::string>{"latest", "step-" + std::to_string(kept),
                                               "step-" + std::to_string(s.killed.step)}))
        << "after the save that follows a kill at \"" << end.point << "\"";
    const load_result resumed = loads_as<State>(ranks, directory, {s.killed});
    EXPECT_EQ(resumed.index, 0) << resumed.why;
    fs::remove_all(directory);
  }
  // A save has at least: its folder, the manifest (2), the rename and latest (3); a rank its file (2).
  EXPECT_GE(points, kill_rank == 0 ? 9 : 2) << "fault points reached; is the hook compiled in?";
}

template <template <class> class State>
void kill_saves(const char* kind) {
  const fs::path root =
      fs::temp_directory_path() / ("shardwise-checkpoint-kill-" + std::string(kind) + "-" + std::to_string(::getpid()));
  tally total;
  for (const int ranks : rank_counts)
    for (const scenario& s : scenarios)
      for (const int kill_rank : kill_ranks)
        if (kill_rank < ranks) {
          fs::create_directories(root);
          kill_at_every_point<State>(kind, s, ranks, kill_rank, root, total);
        }
  fs::remove_all(root);
  std::printf(
      "%s checkpoints: %d saves killed; latest then loaded the previous checkpoint %d times and the new "
      "one %d times, bit-exact; %d kills left a *.tmp, which the next save removed\n",
      kind, total.kills, total.latest_previous, total.latest_new, total.leftovers);
  EXPECT_GT(total.latest_previous, 0);
  EXPECT_GT(total.latest_new, 0);
}

TEST(checkpoint_kill, model_checkpoint_saves_killed_at_every_point_lose_nothing) { kill_saves<model_state>("model"); }

TEST(checkpoint_kill, flat_checkpoint_saves_killed_at_every_point_lose_nothing) { kill_saves<flat_state>("flat"); }

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::vector<int>* list = nullptr;
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--") {
      save_command.assign(argv + i + 1, argv + argc);
      break;
    }
    if (word == "--backend" && i + 1 < argc) backend = argv[++i];
    else if (word == "--ranks")
      list = &rank_counts;
    else if (word == "--kill-ranks")
      list = &kill_ranks;
    else if (list != nullptr)
      list->push_back(std::stoi(word));
  }
  if ((backend != "threads" && backend != "mpi") || rank_counts.empty() || kill_ranks.empty() || save_command.empty()) {
    std::fprintf(stderr,
                 "usage: %s [GoogleTest flags] --backend threads|mpi --ranks P... --kill-ranks R... -- COMMAND...\n",
                 argv[0]);
    return 2;
  }
  return RUN_ALL_TESTS();
}
