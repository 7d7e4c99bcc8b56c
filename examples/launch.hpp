#pragma once
// How every example starts its ranks. By default `thread_ranks` ranks run as threads of this process
// (shardwise::threads::run, no launcher); built with SHARDWISE_EXAMPLE_MPI (the `<name>_mpi` targets),
// each MPI process started by `mpiexec -n N` is one rank (shardwise::mpi::run). Returns main's exit
// status: an error on any rank is printed and gives 1 on threads; under MPI, mpi::run prints it and
// aborts the whole job, so no rank is left waiting. The examples started here take no options, so an
// argument (--help, a rank count) is refused with 2 rather than ignored.
#include <cstdio>
#include <exception>

#ifdef SHARDWISE_EXAMPLE_MPI
#include "shardwise/comm/mpi.hpp"
#else
#include "shardwise/comm/threads.hpp"
#endif

namespace shardwise::examples {

template <class Body>
int launch(int argc, char** argv, [[maybe_unused]] int thread_ranks, Body&& body) {
  if (argc > 1) {
#ifdef SHARDWISE_EXAMPLE_MPI
    std::fprintf(stderr, "%s takes no options (given '%s'): each process mpiexec starts is one rank\n", argv[0],
                 argv[1]);
#else
    std::fprintf(stderr,
                 "%s takes no options (given '%s'): it runs %d ranks as threads of this process; its _mpi "
                 "build runs one rank a process under mpiexec -n N\n",
                 argv[0], argv[1], thread_ranks);
#endif
    return 2;
  }
  try {
#ifdef SHARDWISE_EXAMPLE_MPI
    shardwise::mpi::run(argc, argv, body);
#else
    shardwise::threads::run(thread_ranks, body);
#endif
  } catch (const std::exception& failure) {
    std::fprintf(stderr, "%s\n", failure.what());
    return 1;
  }
  return 0;
}

}  // namespace shardwise::examples
