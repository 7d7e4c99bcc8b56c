// shardwise::mpi adds MPI. MPI_Get_library_version may be called before MPI_Init, so this runs
// without a launcher.
#include <mpi.h>

#include <cstdio>
#include <shardwise/comm/communicator.hpp>

int main() {
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  MPI_Get_library_version(version, &length);
  std::printf("shardwise consumer: shardwise::mpi links %.*s\n", length, version);
}
