// Run by CTest under mpiexec: rank 1 fails while the others wait in a collective. mpi::run must print
// rank 1's error, once and in the user's terms, and abort the job, so nobody waits forever (the test's
// timeout would catch a hang, and its expected output a missing or doubled message).
//   mpi_abort_program              rank 1 throws std::runtime_error("rank one gives up")
//   mpi_abort_program redistribute rank 1's all_to_all_v fails inside redistribute (an injected fault)
#include <stdexcept>
#include <string_view>
#include <vector>

#include "shardwise/comm/mpi.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/tensor/distribute.hpp"
#include "support/faulty_communicator.hpp"

int main(int argc, char** argv) {
  const bool inside_redistribute = argc > 1 && std::string_view(argv[1]) == "redistribute";
  shardwise::mpi::run(argc, argv, [&](shardwise::mpi::communicator& world) {
    if (inside_redistribute) {
      shardwise::testing::faulty_communicator faulty(world.split(0, world.rank()), 1, "all_to_all_v");
      shardwise::process_mesh line(faulty, {faulty.size()});
      const auto t =
          shardwise::from_function<shardwise::row_1d<>>(line, {6, 6}, [](auto i, auto j) { return double(i + j); });
      (void)shardwise::redistribute<shardwise::col_1d<>>(t);
      return;
    }
    std::vector<double> data(16, 1.0);
    world.all_reduce(data, shardwise::op::sum);
    if (world.rank() == 1) throw std::runtime_error("rank one gives up");
    world.all_reduce(data, shardwise::op::sum);  // the others block here until the job is aborted
  });
  return 0;
}
