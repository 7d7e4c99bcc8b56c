// The saving program of the kill test (checkpoint_kill_test.cpp): puts a checkpoint_states state of
// either kind on P ranks and saves it, with the save's fault points armed so that the K-th one sends
// SIGKILL to its own process.
//
//   checkpoint_kill_save --kind flat|model --ranks P --step S --seed N --directory D
//                        [--kill-at K --kill-rank R --record FILE] [--backend threads|mpi]
//
// On threads the P ranks share the process and one count of fault points; under MPI (--backend mpi,
// P processes started by mpiexec) only world rank R counts. Before it kills itself the program
// appends the point's description to FILE, so the test knows where the save died; a save that ends
// before the K-th point exits 0 and leaves FILE alone.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>

namespace {

std::atomic<long> points_to_go{0};  // the fault point at which to die, counted down; 0: never
std::string record_file;

}  // namespace

// Called by the library before each step of a save that changes the disk (optim/checkpoint_files.hpp).
void checkpoint_fault_point(const std::string& what) {
  if (points_to_go.load() <= 0 || points_to_go.fetch_sub(1) != 1) return;
  const std::string line = what + "\n";
  const int file = ::open(record_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (file >= 0) {
    const bool whole = ::write(file, line.data(), line.size()) == static_cast<::ssize_t>(line.size());
    ::close(file);
    if (!whole) std::abort();
  }
  ::kill(::getpid(), SIGKILL);
}
#define SHARDWISE_CHECKPOINT_FAULT_POINT(what) ::checkpoint_fault_point(what)

#include "shardwise/comm/threads.hpp"
#include "support/checkpoint_states.hpp"
#ifdef SHARDWISE_KILL_SAVE_MPI
#include "shardwise/comm/mpi.hpp"
#endif

int main(int argc, char** argv) {
  std::string kind, directory, backend = "threads";
  long ranks = 1, step = 0, seed = 0, kill_at = 0, kill_rank = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--kind") kind = value;
    else if (flag == "--directory")
      directory = value;
    else if (flag == "--record")
      record_file = value;
    else if (flag == "--backend")
      backend = value;
    else if (flag == "--ranks")
      ranks = std::stol(value);
    else if (flag == "--step")
      step = std::stol(value);
    else if (flag == "--seed")
      seed = std::stol(value);
    else if (flag == "--kill-at")
      kill_at = std::stol(value);
    else if (flag == "--kill-rank")
      kill_rank = std::stol(value);
  }
  if ((kind != "flat" && kind != "model") || directory.empty() || (kill_at > 0 && record_file.empty())) {
    std::fprintf(stderr,
                 "usage: %s --kind flat|model --ranks P --step S --seed N --directory D "
                 "[--kill-at K --kill-rank R --record FILE] [--backend threads|mpi]\n",
                 argv[0]);
    return 2;
  }
  const auto body = [&](shardwise::communicator auto& world) {
    if (world.size() != ranks)
      throw std::runtime_error("started on " + std::to_string(world.size()) + " ranks, not " + std::to_string(ranks));
    if (backend == "mpi" && world.rank() == kill_rank) points_to_go = kill_at;
    const auto save = [&](auto&& state) {
      state.set(step, static_cast<int>(seed));
      state.save(directory);
    };
    if (kind == "flat") save(shardwise::testing::flat_state(world));
    else
      save(shardwise::testing::model_state(world));
  };
  try {
    if (backend == "mpi") {
#ifdef SHARDWISE_KILL_SAVE_MPI
      shardwise::mpi::run(argc, argv, body);
#else
      std::fprintf(stderr, "built without MPI\n");
      return 2;
#endif
    } else {
      points_to_go = kill_at;
      shardwise::threads::run(static_cast<int>(ranks), body);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
