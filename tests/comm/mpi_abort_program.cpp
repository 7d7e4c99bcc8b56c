// Run by CTest under mpiexec: rank 1 fails while the others wait in a collective. mpi::run must print
// rank 1's error, once and in the user's terms, and abort the job, so nobody waits forever (the test's
// timeout would catch a hang, and its expected output a missing or doubled message).
//   mpi_abort_program              rank 1 throws std::runtime_error("rank one gives up")
//   mpi_abort_program redistribute rank 1's all_to_all_v fails inside redistribute (an injected fault)
//   mpi_abort_program window       rank 1 throws holding memory shared with the others (an MPI window,
//                                  whose freeing waits for every rank)
//   mpi_abort_program receive      rank 1 throws with a receive posted that no rank will match
//   mpi_abort_program send         rank 1 throws with a send to rank 0 outstanding, above the eager
//                                  limit, that rank 0 (in the all-reduce) never receives
//   mpi_abort_program send_caught  as send, but rank 1 catches its error and goes on to the all-reduce,
//                                  whose call must abort the job: MPI may still read the send's buffer
//   mpi_abort_program stuck        rank 0 calls an all-reduce the others never make; they return. With
//                                  SHARDWISE_MPI_TIMEOUT set, rank 0 must say so and end the job
//   mpi_abort_program healthy      every rank calls both all-reduces and returns: with the timeout set,
//                                  the job must end normally
#include <optional>
#include <span>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "shardwise/comm/mpi.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/tensor/distribute.hpp"
#include "support/faulty_communicator.hpp"

int main(int argc, char** argv) {
  const std::string_view mode = argc > 1 ? argv[1] : "";
  shardwise::mpi::run(argc, argv, [&](shardwise::mpi::communicator& world) {
    if (mode == "redistribute") {
      shardwise::testing::faulty_communicator faulty(world.split(0, world.rank()), 1, "all_to_all_v");
      shardwise::process_mesh line(faulty, {faulty.size()});
      const auto t =
          shardwise::from_function<shardwise::row_1d<>>(line, {6, 6}, [](auto i, auto j) { return double(i + j); });
      (void)shardwise::redistribute<shardwise::col_1d<>>(t);
      return;
    }
    const auto shared = mode == "window" ? shardwise::mpi::share_memory(world, 64) : std::nullopt;
    std::vector<double> data(16, 1.0), never_sent(16), never_received(mode.starts_with("send") ? 1 << 21 : 0);
    world.all_reduce(data, shardwise::op::sum);
    if (mode == "stuck" && world.rank() != 0) return;
    if (mode == "healthy") {
      world.all_reduce(data, shardwise::op::sum);
      if (data[0] != 9.0) throw std::logic_error("the all-reduces summed wrong");
      return;
    }
    if (world.rank() == 1 && mode == "send_caught") {
      try {
        const auto posted = world.isend(std::span<const double>(never_received), 0);
        throw std::runtime_error("rank one gives up");
      } catch (const std::runtime_error&) {
      }
    } else if (world.rank() == 1 && mode != "stuck") {
      const auto posted = mode == "receive" ? std::optional(world.irecv(never_sent, 0))
                          : mode == "send"  ? std::optional(world.isend(std::span<const double>(never_received), 0))
                                            : std::nullopt;
      throw std::runtime_error("rank one gives up");
    }
    world.all_reduce(data, shardwise::op::sum);  // the others block here until the job is aborted
  });
  return 0;
}
