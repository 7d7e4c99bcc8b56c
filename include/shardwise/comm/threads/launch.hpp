#pragma once
// threads::run(P, body): P ranks as threads of this process, rank 0 on the calling thread; or as
// fibers on a thread per core (ranks_as::fibers).
#include <algorithm>
#include <exception>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "shardwise/comm/detail/fibers.hpp"
#include "shardwise/comm/threads/communicator.hpp"
#include "shardwise/comm/threads/failure.hpp"
#include "shardwise/comm/threads/group.hpp"
#include "shardwise/core/element_memory.hpp"
#include "shardwise/core/error.hpp"
#include "shardwise/core/rank_local.hpp"

namespace shardwise::threads {

// How the ranks run: a thread each, or as fibers (comm/detail/fibers.hpp) on a thread per core, for
// programs of many more ranks than cores whose ranks do little between collectives (shapes-only
// simulation): a rank waiting for its peers then costs a switch in user space, not a kernel wake-up.
// Either way each rank has its own rank_local state and the program computes the same.
enum class ranks_as { threads, fibers };

// Runs body(communicator&) on `ranks` ranks and returns when all have finished, each rank's element
// memory counted (core/element_memory.hpp: element_memory::of_this_thread()). An exception on any
// rank aborts the others' calls (each throws peer_error, "stopped because rank R failed: …"); run()
// rethrows the error of the rank that failed on its own (detail::originating_error): a
// shardwise::error as it is (it names its rank and the user's calls), anything else nested in a
// rank_failure. Ranks that all wait in calls or have returned, so none can go on, throw deadlock_error
// where they would wait for ever (comm/threads/stall_watch.hpp).
template <class Body>
void run(int ranks, Body&& body, ranks_as how = ranks_as::threads) {
  if (ranks < 1) throw argument_error(-1, "threads::run", "needs at least one rank, got " + std::to_string(ranks));
  auto run_context = std::make_shared<detail::context>(ranks);
  std::vector<int> world_ranks(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) world_ranks[static_cast<std::size_t>(r)] = r;
  const auto world = detail::make_group(run_context, std::move(world_ranks));

  auto rank_main = [&](int rank) {
    try {
      const element_memory::scope counted(std::make_shared<element_memory>(true));  // what the rank holds
      communicator comm(world, rank);
      body(comm);
    } catch (error& raised) {  // one raised without a rank (by a part with no communicator) happened on this one
      raised.on_rank(rank);
      run_context->failing(rank, std::current_exception());
    } catch (...) {
      run_context->failing(rank, std::current_exception());
    }
    run_context->returned(rank);
  };
  if (how == ranks_as::fibers) {
    const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    shardwise::detail::run_as_fibers(ranks, std::min(ranks, cores), rank_main);
  } else {
    std::vector<std::jthread> others;
    others.reserve(static_cast<std::size_t>(ranks - 1));
    for (int r = 1; r < ranks; ++r) {
      try {
        others.emplace_back(rank_main, r);
      } catch (const std::system_error& e) {
        // The ranks started would wait for this one for ever: it fails, so they stop (peer_error).
        run_context->failing(
            r, std::make_exception_ptr(argument_error(
                   r, "threads::run",
                   "cannot start the thread of rank " + std::to_string(r) + " of " + std::to_string(ranks) + " (" +
                       e.what() + "): run fewer ranks, or ranks_as::fibers, which need a thread per core")));
        break;
      }
    }
    // Rank 0 runs on the calling thread but not with its state: what the rank keeps (its products'
    // buffers, accounted to a simulated device's memory) ends with the run, as on the other threads.
    rank_state rank_0;
    const rank_state::scope as_rank(rank_0);
    if (static_cast<int>(others.size()) == ranks - 1) rank_main(0);
  }

  const auto [failed, failure] = detail::originating_error(run_context->errors);
  if (!failure) return;
  try {
    std::rethrow_exception(failure);
  } catch (const shardwise::error&) {
    throw;
  } catch (const std::exception& original) {
    std::throw_with_nested(
        rank_failure(failed, "threads::run", std::string("the rank body threw: ") + original.what()));
  } catch (...) {
    std::throw_with_nested(rank_failure(failed, "threads::run", "the rank body threw a non-standard exception"));
  }
}

}  // namespace shardwise::threads
