// Run by CTest under mpiexec: rank 1 throws while the others wait in an all-reduce. mpi::run must
// print rank 1's error and abort the job, so nobody waits forever (the test's timeout would catch a
// hang, and its expected output the missing message).
#include <stdexcept>
#include <vector>

#include "shardwise/comm/mpi.hpp"

int main(int argc, char** argv) {
  shardwise::mpi::run(argc, argv, [](shardwise::mpi::communicator& world) {
    std::vector<double> data(16, 1.0);
    world.all_reduce(data, shardwise::op::sum);
    if (world.rank() == 1) throw std::runtime_error("rank one gives up");
    world.all_reduce(data, shardwise::op::sum);  // the others block here until the job is aborted
  });
  return 0;
}
