// Example 01: hello, mesh.
//
// Eight ranks arrange themselves as a 2x2x2 cube, the process grid of 3-D tensor parallelism, say
// where they sit, and add up a number along each of the cube's three directions.
//
// One source, two ways to run it (see docs/communicators.md for both backends):
//   scripts/run-example 01_hello_mesh                8 ranks as threads of one process
//   mpiexec -n 8 build/examples/01_hello_mesh_mpi    8 MPI processes: the same file built with
//                                                    SHARDWISE_EXAMPLE_MPI (Open MPI wants
//                                                    --oversubscribe when cores are fewer)
//
// Read top to bottom; the numbered steps are the tutorial.
#include <array>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "launch.hpp"
#include "shardwise/comm/communicator.hpp"
#include "shardwise/mesh/process_mesh.hpp"

int main(int argc, char** argv) {
  // 1. The rank body. Every rank runs this same function (SPMD); `world` is this rank's handle on the
  //    communicator of all ranks. Written against the `communicator` concept, not a backend, the body
  //    runs unchanged on threads and on MPI: only the launcher at the bottom differs.
  auto body = [](shardwise::communicator auto& world) {
    // 2. Arrange the ranks as a 2x2x2 grid. Construction is collective (every rank makes the same
    //    call) and checks that the grid fits: on 6 ranks it throws shardwise::mesh_error,
    //    "[rank 0] process_mesh: the grid 2x2x2 needs 8 ranks, the communicator has 6".
    //    (For any rank count, shardwise::balanced_shape<3>(world.size()) picks a near-cubic grid.)
    shardwise::process_mesh mesh(world, {2, 2, 2});

    // 3. Where am I? Coordinates (i, j, l) as in the 3-D paper. Ranks are numbered row-major with the
    //    last coordinate fastest, so here rank = 4i + 2j + l; mesh.coords(rank) and mesh.rank_of(point)
    //    convert either way.
    const auto [i, j, l] = mesh.coords();

    // 4. The three directions are communicators of their own, made by the mesh:
    //      mesh.x(): the 2 ranks (0, j, l), (1, j, l)   -- i varies, my rank in it is i
    //      mesh.y(): the 2 ranks (i, 0, l), (i, 1, l)   -- j varies, my rank in it is j
    //      mesh.z(): the 2 ranks (i, j, 0), (i, j, 1)   -- l varies, my rank in it is l
    //    Each supports every collective. Sum my world rank along each direction, in place:
    std::array<int, 1> along_x{world.rank()};
    std::array<int, 1> along_y{world.rank()};
    std::array<int, 1> along_z{world.rank()};
    mesh.x().all_reduce(along_x, shardwise::op::sum);
    mesh.y().all_reduce(along_y, shardwise::op::sum);
    mesh.z().all_reduce(along_z, shardwise::op::sum);

    // 5. Check against the sum worked out by hand: the ranks on my x line are (t, j, l) for t = 0, 1.
    auto expected_sum = [&](std::size_t axis) {
      int sum = 0;
      for (int t = 0; t < mesh.shape()[axis]; ++t) {
        auto point = mesh.coords();
        point[axis] = t;
        sum += mesh.rank_of(point);
      }
      return sum;
    };
    const bool correct =
        along_x[0] == expected_sum(0) && along_y[0] == expected_sum(1) && along_z[0] == expected_sum(2);

    // 6. Print in rank order. Threads or processes printing at once would interleave their lines (and
    //    mpiexec forwards each process's output on its own schedule), so every rank sends its row to
    //    all others with all_gather, and rank 0 alone prints the table.
    const std::array<int, 7> mine{i, j, l, along_x[0], along_y[0], along_z[0], correct ? 1 : 0};
    std::vector<int> table(mine.size() * static_cast<std::size_t>(world.size()));
    world.all_gather(mine, table);
    int wrong = 0;
    if (world.rank() == 0) std::printf("rank  (i, j, l)  sum along x  along y  along z\n");
    for (int rank = 0; rank < world.size(); ++rank) {
      const int* row = table.data() + mine.size() * static_cast<std::size_t>(rank);
      if (row[6] == 0) ++wrong;
      if (world.rank() == 0)
        std::printf("%4d  (%d, %d, %d)  %11d  %7d  %7d%s\n", rank, row[0], row[1], row[2], row[3], row[4], row[5],
                    row[6] != 0 ? "" : "   <- wrong");
    }

    // 7. Every rank saw the same table, so all agree on the verdict: they fail together, and none is
    //    left waiting in a collective for a rank that gave up.
    if (wrong != 0) throw std::runtime_error(std::to_string(wrong) + " ranks got a wrong sum");
    if (world.rank() == 0) std::printf("all %d ranks got the sums they expected\n", world.size());
  };

  // 8. Launch (examples/launch.hpp, shared by every example). On threads, shardwise::threads::run(8,
  //    body) starts 8 ranks and rethrows the first error any rank threw. Built as 01_hello_mesh_mpi,
  //    mpiexec starts the processes and shardwise::mpi::run(argc, argv, body) gives each its rank of
  //    MPI_COMM_WORLD; an error is printed and aborts the job. The exit status is non-zero either way.
  return shardwise::examples::launch(argc, argv, 8, body);
}
