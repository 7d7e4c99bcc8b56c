#pragma once
// One test body, every backend (the Kokkos way): a typed test suite over `backends`, whose single
// member is the backend this executable was built for. The same source builds twice: `<name>_threads`
// runs each body in-process for each rank count it declares; `<name>_mpi` (SHARDWISE_TEST_MPI) runs it
// once on the MPI world that mpiexec started, and fails if that size is not one it declares (CTest
// launches each test only at sizes it declares: tests/support/rank_counts.hpp). Some also build as
// `<name>_sim_gpu` (SHARDWISE_TEST_SIM_GPU): in-process on simulated GPUs.
#include <gtest/gtest.h>

#include <algorithm>
#include <initializer_list>
#include <memory>
#include <string>

#include "shardwise/comm/threads.hpp"
#ifdef SHARDWISE_TEST_MPI
#include "shardwise/comm/mpi.hpp"
#include "shardwise/core/element_memory.hpp"
#include "support/rank_counts.hpp"
#endif
#ifdef SHARDWISE_TEST_SIM_GPU
#include "shardwise/sim/presets.hpp"
#include "shardwise/sim/sim_gpu.hpp"
#endif

namespace shardwise::testing {

inline constexpr std::initializer_list<int> default_rank_counts = {1, 2, 3, 4, 6, 8};

struct threads_backend {
  using communicator_type = shardwise::threads::communicator;  // what a body's world is
  // Reductions combine ranks 0, 1, …, P-1 in order, so float sums equal a serial left-to-right sum.
  static constexpr bool sums_in_rank_order = true;

  // Each rank count as threads, then the largest again as fibers (a thread per core), so a body that
  // holds its thread while it waits for a peer, or keeps a rank's state in a thread_local, hangs or
  // fails here rather than in a shapes-only simulation.
  template <class Body>
  static void run(Body&& body, std::initializer_list<int> rank_counts = default_rank_counts) {
    for (const int ranks : rank_counts) {
      SCOPED_TRACE("threads backend, P = " + std::to_string(ranks));
      shardwise::threads::run(ranks, body);
    }
    const int largest = std::max(rank_counts);
    SCOPED_TRACE("threads backend, P = " + std::to_string(largest) + " as fibers");
    shardwise::threads::run(largest, body, shardwise::threads::ranks_as::fibers);
  }
};

#ifdef SHARDWISE_TEST_MPI
struct mpi_backend {
  using communicator_type = shardwise::mpi::communicator;
  static constexpr bool sums_in_rank_order = false;  // MPI picks its own reduction tree

  template <class Body>
  static void run(Body&& body, std::initializer_list<int> rank_counts = default_rank_counts) {
    if (rank_count_listing::instance().active()) {
      list_rank_counts(current_test_name(), rank_counts);
      throw rank_counts_listed{};
    }
    auto world = shardwise::mpi::communicator::world();
    if (std::find(rank_counts.begin(), rank_counts.end(), world.size()) == rank_counts.end()) {
      FAIL() << "this test runs on " << rank_counts_text(rank_counts, ", ") << " MPI ranks, not on " << world.size()
             << ": launch it with mpiexec -n <one of those> (its CTest tests do)";
    }
    // The rank's element memory counted, as mpi::run counts it (the test main has started MPI).
    const element_memory::scope counted(std::make_shared<element_memory>(true));
    body(world);
  }
};
using backend = mpi_backend;
#elif defined(SHARDWISE_TEST_SIM_GPU)
struct sim_gpu_backend {
  using communicator_type = shardwise::sim_gpu::communicator;
  static constexpr bool sums_in_rank_order = true;  // the data move as in the threads backend

  // MI210s in nodes of two when P is even (so calls cross both xGMI and InfiniBand), else one node.
  template <class Body>
  static void run(Body&& body, std::initializer_list<int> rank_counts = default_rank_counts) {
    for (const int ranks : rank_counts) {
      SCOPED_TRACE("sim_gpu backend, P = " + std::to_string(ranks));
      shardwise::sim_gpu::run(ranks, shardwise::sim::presets::mi210_nodes(ranks, ranks % 2 == 0 ? 2 : ranks), body);
    }
  }
};
using backend = sim_gpu_backend;
#else
using backend = threads_backend;
#endif
// The typed test suites' list; `backend` and its communicator_type name the same to code outside a test
// body (explicit instantiations in a source of their own).
using backends = ::testing::Types<backend>;

}  // namespace shardwise::testing
