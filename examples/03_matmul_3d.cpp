// Example 03: a 3-D matrix product.
//
// Eight ranks form a 2x2x2 cube and multiply C = A·B with the 3-D paper's load-balanced algorithm:
// every rank holds 1/8 of A, of B and of C, all-gathers A along y and B along x, runs one local GEMM,
// and reduce-scatters C along z; then again pipelined in two chunks (matmul_options). Both results are
// checked against one Eigen product of the whole matrices, and each rank prints the bytes it moved,
// axis by axis, beside the paper's count.
//
//   scripts/run-example 03_matmul_3d                      8 ranks as threads of one process
//   mpiexec -n 8 build/examples/03_matmul_3d_mpi          8 MPI processes (--oversubscribe if needed)
//
// Read top to bottom; the numbered steps are the tutorial.
#include <Eigen/Core>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "launch.hpp"
#include "shardwise/comm/communicator.hpp"
#include "shardwise/layout/cube_3d.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/ops/matmul.hpp"
#include "shardwise/tensor/distribute.hpp"

int main(int argc, char** argv) {
  auto body = [](shardwise::communicator auto& world) {
    // 1. The cube: coordinates (i, j, l) along x, y, z (example 01).
    shardwise::process_mesh mesh(world, {2, 2, 2});

    // 2. The operands' layouts are types. cube_3d<> is the paper's: A as `input` (rows over (x, y),
    //    columns over z), B as `weight` (rows over z, columns over (y, x)). Each rank fills its own
    //    blocks from a formula; nobody holds a whole matrix. The shapes need not divide by the cube:
    //    with the `padded` rule each block is rounded up and the product stays exact.
    using cube = shardwise::cube_3d<shardwise::directions<>, shardwise::padded>;
    const std::int64_t m = 96;
    const std::int64_t k = 64;
    const std::int64_t n = 80;
    auto a_entry = [](std::int64_t i, std::int64_t j) { return std::sin(0.1 * static_cast<double>(i + 2 * j)); };
    auto b_entry = [](std::int64_t i, std::int64_t j) { return std::cos(0.05 * static_cast<double>(3 * i - j)); };
    const auto a = shardwise::from_function<cube::input>(mesh, {m, k}, a_entry);
    const auto b = shardwise::from_function<cube::weight>(mesh, {k, n}, b_entry);

    // 3. The product. Its result's layout comes from the operands' types: cube::output (rows over
    //    (x, z), columns over y), which is the next layer's input, cube::swapped::input. mesh.traffic()
    //    before and after gives what the product moved on each axis.
    const auto before = mesh.traffic();
    const auto c = shardwise::matmul(a, b);
    const auto moved = mesh.traffic() - before;
    static_assert(std::is_same_v<typename decltype(c)::layout_type, cube::output>);

    // 4. Options change how a product runs, not what it computes (shardwise::matmul_options). In two
    //    chunks the 3-D product is pipelined in bands of rows: band 2's gather of A travels while band
    //    1 is multiplied, and band 1's sums are reduce-scattered while band 2 is. The same C, from the
    //    same bytes moved; on a machine whose links and cores work at once, in less time.
    const auto before_chunks = mesh.traffic();
    const auto c_in_chunks = shardwise::matmul(a, b, shardwise::matmul_options{.chunks = 2});
    const auto moved_in_chunks = mesh.traffic() - before_chunks;
    if (moved_in_chunks.total().bytes_sent != moved.total().bytes_sent)
      throw std::runtime_error("in chunks the product moved " + std::to_string(moved_in_chunks.total().bytes_sent) +
                               " bytes, at once " + std::to_string(moved.total().bytes_sent));

    // 5. Check both against Eigen on the whole matrices (all_gather gives every rank the whole C).
    using matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    matrix whole_a(m, k);
    matrix whole_b(k, n);
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < k; ++j) whole_a(i, j) = a_entry(i, j);
    for (std::int64_t i = 0; i < k; ++i)
      for (std::int64_t j = 0; j < n; ++j) whole_b(i, j) = b_entry(i, j);
    const matrix expected = whole_a * whole_b;
    const double error = (shardwise::all_gather(c) - expected).cwiseAbs().maxCoeff();
    const double error_in_chunks = (shardwise::all_gather(c_in_chunks) - expected).cwiseAbs().maxCoeff();

    // 6. Print in rank order (rank 0 prints a table all ranks sent it, as in example 01). The paper's
    //    count for a p x p x p cube: (p-1)(MN + NK + MK)/p³ elements sent per rank, here with the
    //    blocks as stored (96/4 rows of A, 80/4 columns of B: these shapes divide, so no padding).
    const std::array<std::int64_t, 4> mine{moved.axes[0].bytes_sent, moved.axes[1].bytes_sent, moved.axes[2].bytes_sent,
                                           moved.total().bytes_received};
    std::vector<std::int64_t> table(mine.size() * static_cast<std::size_t>(world.size()));
    world.all_gather(mine, table);
    if (world.rank() == 0) {
      std::printf("C = A*B, %lldx%lld times %lldx%lld, on a 2x2x2 cube\n", static_cast<long long>(m),
                  static_cast<long long>(k), static_cast<long long>(k), static_cast<long long>(n));
      std::printf("rank  bytes sent along x (B)  along y (A)  along z (C)  received in all\n");
      for (int rank = 0; rank < world.size(); ++rank) {
        const std::int64_t* row = table.data() + mine.size() * static_cast<std::size_t>(rank);
        std::printf("%4d  %20lld  %11lld  %11lld  %15lld\n", rank, static_cast<long long>(row[0]),
                    static_cast<long long>(row[1]), static_cast<long long>(row[2]), static_cast<long long>(row[3]));
      }
      const std::int64_t p = 2;
      const std::int64_t paper_bytes = (p - 1) * (m * k + k * n + m * n) / (p * p * p) * 8;
      std::printf("the paper's count: (p-1)(MN + NK + MK)/p^3 * 8 bytes = %lld bytes per rank\n",
                  static_cast<long long>(paper_bytes));
      std::printf("largest difference from Eigen's product: %.3g (in 2 chunks: %.3g)\n", error, error_in_chunks);
    }
    if (!(error < 1e-9 && error_in_chunks < 1e-9))
      throw std::runtime_error("the 3-D product differs from Eigen's by " + std::to_string(error) + ", in chunks by " +
                               std::to_string(error_in_chunks));
  };

  // 7. Launch 8 ranks: threads here, MPI processes in 03_matmul_3d_mpi (examples/launch.hpp).
  return shardwise::examples::launch(argc, argv, 8, body);
}
