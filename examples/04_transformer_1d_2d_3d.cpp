// Example 04: a few training steps of a small Transformer stack, tensor-parallel in 1-D, 2-D and 3-D.
//
// The same two-block model (width 32, 8 heads, sequences of 8, batches of 8 sequences) learns to map
// each input to a fixed smooth target, with plain SGD on a mean squared error. It runs three times:
//   1-D (Megatron)   on all P ranks:         heads and the MLP's width cut over the ranks
//   2-D (SUMMA)      on a q x q grid:        samples over grid rows, width over grid columns
//   3-D (the cube)   on a p_x x p_y x p_z grid: every matrix cut over all three axes
// Every family starts from the same weights (they are keyed by global index), so the three loss
// curves agree to rounding; what differs is who holds what, and how many bytes each rank moves.
//
//   cmake --build build --target 04_transformer_1d_2d_3d && build/examples/04_transformer_1d_2d_3d
//                                                           8 ranks as threads
//   mpiexec -n 8 build/examples/04_transformer_1d_2d_3d_mpi  8 MPI processes
//
// Read top to bottom; the numbered steps are the tutorial (docs/tensor-parallel.md explains the layers).
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include "launch.hpp"
#include "shardwise/comm/communicator.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/mesh/shape.hpp"
#include "shardwise/nn/transformer_block.hpp"
#include "shardwise/tensor/binary_transform.hpp"
#include "shardwise/tensor/norm.hpp"

namespace nn = shardwise::nn;

namespace {

constexpr std::int64_t batch = 8;
constexpr nn::block_options options{.hidden = 32, .heads = 8, .sequence = 8, .expansion = 4, .causal = true};
constexpr int steps = 20;
constexpr float learning_rate = 0.05f;

float input_value(std::int64_t i, std::int64_t j) { return std::sin(0.1f * float(i) + 0.3f * float(j)); }
float target_value(std::int64_t i, std::int64_t j) { return 0.5f * std::cos(0.2f * float(i) - 0.1f * float(j)); }

// 1. One family on one mesh: build the stack, then forward, loss, backward and an SGD step, `steps` times.
template <class Family, class Mesh>
void train(Mesh& mesh, const char* name) {
  using block = nn::transformer_block<float, Family, Mesh>;
  block first(mesh, options, 1);
  block second(mesh, options, 2);

  // 2. Inputs and targets in the family's input layout; each rank evaluates only its own elements.
  const shardwise::matrix_extents extents{batch * options.sequence, options.hidden};
  const auto x = shardwise::from_function<typename Family::input>(mesh, extents, input_value);
  const auto target = shardwise::from_function<typename Family::input>(mesh, extents, target_value);
  const float elements = float(extents.rows * extents.cols);

  const bool speaks = mesh.world().rank() == 0;
  const auto traffic_before = mesh.traffic();
  const auto start = std::chrono::steady_clock::now();
  double loss = 0;
  for (int step = 1; step <= steps; ++step) {
    // 3. Forward through both blocks; the output has the input's layout, so blocks stack.
    const auto y = second.forward(first.forward(x));

    // 4. Loss = mean((y - target)²), and its gradient 2 (y - target) / n, element by element.
    const auto error = shardwise::transform(y, target, [](float a, float b) { return a - b; });
    const double norm = shardwise::frobenius_norm(error);
    loss = norm * norm / elements;
    const auto gradient = shardwise::transform(error, [&](float e) { return 2 * e / elements; });

    // 5. Backward through both blocks, then each rank steps the parameter blocks it holds.
    (void)first.backward(second.backward(gradient));
    auto descend = [](auto& parameter) { parameter.descend(learning_rate); };
    first.for_each_parameter(descend);
    second.for_each_parameter(descend);

    if (speaks) {
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::printf("\r%s  step %2d/%d  loss %.5f  %.2f ms/step", name, step, steps, loss, 1e3 * seconds / step);
      std::fflush(stdout);
    }
  }

  // 6. What this rank moved, per mesh axis: the cost of the layout, measured.
  const auto moved = mesh.traffic() - traffic_before;
  if (speaks) {
    std::printf("\n%s  rank 0 sent %.1f KiB per step (", name, double(moved.total().bytes_sent) / 1024 / steps);
    for (std::size_t a = 0; a < moved.axes.size(); ++a)
      std::printf("%saxis %zu: %.1f KiB", a == 0 ? "" : ", ", a, double(moved.axes[a].bytes_sent) / 1024 / steps);
    std::printf("; world: %.1f KiB)\n", double(moved.world.bytes_sent) / 1024 / steps);
  }
}

}  // namespace

int main(int argc, char** argv) {
  return shardwise::examples::launch(argc, argv, /*thread_ranks*/ 8, [](shardwise::communicator auto& world) {
    const int ranks = world.size();

    // 7. 1-D on every rank.
    {
      shardwise::process_mesh mesh(world, {ranks});
      train<nn::tensor_parallel_1d<>>(mesh, "1-D");
    }

    // 8. 2-D on the largest square grid that fits; the ranks outside it sit this one out.
    int q = 1;
    while ((q + 1) * (q + 1) <= ranks) ++q;
    const bool in_square = world.rank() < q * q;
    auto square = world.split(in_square ? 0 : 1, world.rank());
    if (in_square) {
      shardwise::process_mesh mesh(square, {q, q});
      train<nn::tensor_parallel_2d<>>(mesh, "2-D");
    }

    // 9. 3-D on the most cube-like grid of all the ranks (2x2x2 for 8).
    shardwise::process_mesh mesh(world, shardwise::balanced_shape<3>(ranks));
    train<nn::tensor_parallel_3d<>>(mesh, "3-D");
  });
}
