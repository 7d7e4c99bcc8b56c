// Example 04: a few training steps of a small Transformer stack, tensor-parallel in 1-D, 2-D and 3-D.
//
// The same two-block model (width 32, 8 heads, sequences of 8, batches of 8 sequences) learns to map
// each input to a fixed smooth target, with plain SGD on a mean squared error. It runs three times, each
// on the largest grid of powers of two that fits the ranks (all of them at 8; extra ranks sit out):
//   1-D (Megatron)   on up to 8 ranks:       heads and the MLP's width cut over the ranks
//   2-D (SUMMA)      on a q x q grid:        samples over grid rows, width over grid columns
//   3-D (the cube)   on a p x q x q grid:    every matrix cut over all three axes
// Every family starts from the same weights (they are keyed by global index), so the three loss
// curves agree to rounding; what differs is who holds what, and how many bytes each rank moves.
// On the 1-D mesh a sequence-parallel MLP then shows the collective matmul: activations cut by rows,
// the all-gather and reduce-scatter run as rings that overlap the GEMMs, the same values as plain 1-D;
// three projections that read one input (Q, K and V) share one ring; and the whole stack runs once
// more in the sequence-parallel family, the same loss curve again.
//
//   cmake --build build --target 04_transformer_1d_2d_3d && build/examples/04_transformer_1d_2d_3d
//                                                           8 ranks as threads
//   mpiexec -n 8 build/examples/04_transformer_1d_2d_3d_mpi  8 MPI processes (any number works;
//                                                            --oversubscribe if needed)
//
// Read top to bottom; the numbered steps are the tutorial (docs/tensor-parallel.md explains the layers).
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <tuple>

#include <unistd.h>

#include "launch.hpp"
#include "shardwise/comm/communicator.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/mesh/shape.hpp"
#include "shardwise/nn/linear.hpp"
#include "shardwise/nn/transformer_block.hpp"
#include "shardwise/ops/gelu.hpp"
#include "shardwise/tensor/binary_transform.hpp"
#include "shardwise/tensor/distribute.hpp"
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
void train(Mesh& mesh, const char* family) {
  const std::string name = std::string(family) + " on " + shardwise::shape_string(mesh.shape());
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
  const bool on_terminal = isatty(STDOUT_FILENO) != 0;
  double first_loss = 0, loss = 0;
  for (int step = 1; step <= steps; ++step) {
    // 3. Forward through both blocks; the output has the input's layout, so blocks stack.
    const auto y = second.forward(first.forward(x));

    // 4. Loss = mean((y - target)²), and its gradient 2 (y - target) / n, element by element:
    //    transform_arrays hands f each rank's blocks whole, as Eigen arrays, and Eigen vectorises the
    //    expression f returns; transform calls f once an element.
    const auto error = shardwise::transform_arrays(y, target, [](const auto& a, const auto& b) { return a - b; });
    const double norm = shardwise::frobenius_norm(error);
    loss = norm * norm / elements;
    const auto gradient = shardwise::transform(error, [&](float e) { return 2 * e / elements; });

    // 5. Backward through both blocks (adding into the gradients), then each rank steps the parameter
    //    blocks it holds and clears their gradients for the next step.
    (void)first.backward(second.backward(gradient));
    auto descend = [](const std::string& /*name*/, auto& parameter) {
      parameter.descend(learning_rate);
      parameter.zero_gradient();
    };
    first.for_each_parameter(descend);
    second.for_each_parameter(descend);

    if (step == 1) first_loss = loss;
    // On a terminal the line is rewritten each step; into a file or a pipe only the last is written.
    if (speaks && (on_terminal || step == steps)) {
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::printf("%s%s  step %2d/%d  loss %.5f -> %.5f  %.2f ms/step", on_terminal ? "\r" : "", name.c_str(), step,
                  steps, first_loss, loss, 1e3 * seconds / step);
      std::fflush(stdout);
    }
  }

  // 6. What this rank moved, per mesh axis: the cost of the layout, measured.
  const auto moved = mesh.traffic() - traffic_before;
  if (speaks) {
    std::printf("\n%s  rank 0 sent %.1f KiB per step (", name.c_str(), double(moved.total().bytes_sent) / 1024 / steps);
    for (std::size_t a = 0; a < moved.axes.size(); ++a)
      std::printf("%saxis %zu: %.1f KiB", a == 0 ? "" : ", ", a, double(moved.axes[a].bytes_sent) / 1024 / steps);
    std::printf("; world: %.1f KiB)\n", double(moved.world.bytes_sent) / 1024 / steps);
  }
}

// 7. Sequence parallelism (Megatron-LM) on a 1-D mesh: the activations between the tensor-parallel
//    products are cut by rows (tokens) over the ranks, col_1d, instead of replicated, so each rank holds
//    1/P of them. The column-parallel linear then needs its input's rows gathered, and the row-parallel
//    one's sum is reduce-scattered back to rows instead of all-reduced. Given those layouts nn::linear
//    runs both as collective matmuls (ops/collective_matmul.hpp): rings in which one piece of x, or of
//    the sum, travels while the GEMM of another runs, so the transfers hide behind the arithmetic.
template <class Mesh>
void sequence_parallel_mlp(Mesh& mesh) {
  using shardwise::col_1d;
  using shardwise::replicated;
  using shardwise::row_1d;
  const std::int64_t width = options.hidden;
  const std::int64_t expanded = options.expansion * options.hidden;

  // The MLP's two linears, sequence-parallel and plain 1-D; the same seeds give both the same weights.
  nn::linear<float, col_1d<>, row_1d<>, Mesh> up(mesh, width, expanded, 3);              // all_gather_matmul(x, W1)
  nn::linear<float, row_1d<>, col_1d<>, Mesh, col_1d<>> down(mesh, expanded, width, 4);  // matmul_reduce_scatter(h, W2)
  nn::linear<float, replicated<>, row_1d<>, Mesh> plain_up(mesh, width, expanded, 3);    // x·W1, local
  nn::linear<float, row_1d<>, col_1d<>, Mesh> plain_down(mesh, expanded, width, 4);      // h·W2, all-reduced

  // 8. Forward and backward through GeLU between the linears; the backward runs the rings too (the
  //    gradient of a gathering product is a reduce-scatter, and the reverse). Returns the whole results,
  //    to compare, and the bytes this rank sent forward and backward.
  const auto forward_backward = [&](auto& first, auto& second, const auto& x, const auto& output_gradient) {
    const auto start = mesh.traffic();
    const auto h = first.forward(x);
    const auto y = second.forward(shardwise::gelu(h));
    const auto forward_done = mesh.traffic();
    const auto dx = first.backward(shardwise::gelu_backward(second.backward(output_gradient), h));
    const auto backward_done = mesh.traffic();
    return std::tuple{shardwise::all_gather(y), shardwise::all_gather(dx), (forward_done - start).total().bytes_sent,
                      (backward_done - forward_done).total().bytes_sent};
  };
  const shardwise::matrix_extents extents{batch * options.sequence, width};
  const auto x = shardwise::from_function<col_1d<>>(mesh, extents, input_value);
  const auto dy = shardwise::from_function<col_1d<>>(mesh, extents, target_value);
  const auto x_everywhere = shardwise::redistribute<replicated<>>(x);
  const auto [y, dx, forward_sent, backward_sent] = forward_backward(up, down, x, dy);
  const auto [plain_y, plain_dx, plain_forward_sent, plain_backward_sent] =
      forward_backward(plain_up, plain_down, x_everywhere, shardwise::redistribute<replicated<>>(dy));

  // 9. The same values up to the order of float sums, from 1/P of the activation rows per rank. Forward,
  //    the two rings send what the plain path's one all-reduce does; backward, half as much again, since
  //    the first linear's weight gradient gathers x again instead of keeping it whole (memory traded for
  //    bytes). The second linear gathers dy once, in one ring, for both its gradients.
  const float difference = std::max((y - plain_y).cwiseAbs().maxCoeff(), (dx - plain_dx).cwiseAbs().maxCoeff());
  if (mesh.world().rank() == 0) {
    std::printf(
        "1-D  sequence-parallel MLP: rank 0 holds %lld of %lld activation rows; largest difference from "
        "plain 1-D: %.2g\n",
        static_cast<long long>(x.local().rows()), static_cast<long long>(x_everywhere.local().rows()),
        double(difference));
    std::printf("1-D  sequence-parallel MLP: rank 0 sent %.1f KiB forward, %.1f KiB backward (plain 1-D: %.1f, %.1f)\n",
                double(forward_sent) / 1024, double(backward_sent) / 1024, double(plain_forward_sent) / 1024,
                double(plain_backward_sent) / 1024);
  }
  if (!(difference < 1e-4f))
    throw std::runtime_error("the sequence-parallel MLP differs from the plain 1-D one by " +
                             std::to_string(difference));
}

// 10. Linears that read one input, as attention's Q, K and V do, run together
//     (linear::forward_sharing_input): one ring gathers x for the three products, where each alone
//     gathers it again. The results are the same bits; the sequence-parallel family's attention runs its
//     projections so, forward and backward (backward_sharing_input).
template <class Mesh>
void shared_input_projections(Mesh& mesh) {
  using projection = nn::linear<float, shardwise::col_1d<>, shardwise::row_1d<>, Mesh>;
  const std::int64_t width = options.hidden;
  projection q(mesh, width, width, 5), k(mesh, width, width, 6), v(mesh, width, width, 7);
  const auto x = shardwise::from_function<shardwise::col_1d<>>(mesh, {batch * options.sequence, width}, input_value);
  const auto start = mesh.traffic();
  const auto together = projection::forward_sharing_input(x, {&q, &k, &v});
  const auto shared = mesh.traffic();
  const std::array alone{q.forward_without_keeping(x), k.forward_without_keeping(x), v.forward_without_keeping(x)};
  const auto done = mesh.traffic();
  float difference = 0;
  for (std::size_t i = 0; i < alone.size(); ++i)
    difference = std::max(difference,
                          (shardwise::all_gather(together[i]) - shardwise::all_gather(alone[i])).cwiseAbs().maxCoeff());
  if (mesh.world().rank() == 0)
    std::printf(
        "1-D  Q, K and V from one input: rank 0 sent %.1f KiB for the three in one ring, %.1f KiB one at a "
        "time; largest difference %.2g\n",
        double((shared - start).total().bytes_sent) / 1024, double((done - shared).total().bytes_sent) / 1024,
        double(difference));
  if (difference != 0.0f)
    throw std::runtime_error("the projections in one ring differ from each alone by " + std::to_string(difference));
}

// The largest power of two up to `limit`.
int power_of_two_up_to(int limit) {
  int n = 1;
  while (2 * n <= limit) n *= 2;
  return n;
}

// Runs body(part) on the first `used` ranks of `world`, split off as their own communicator; the
// others sit this family out.
template <class Communicator, class Body>
void on_first(Communicator& world, int used, Body&& body) {
  const bool inside = world.rank() < used;
  auto part = world.split(inside ? 0 : 1, world.rank());
  if (inside) body(part);
}

}  // namespace

int main(int argc, char** argv) {
  return shardwise::examples::launch(argc, argv, /*thread_ranks*/ 8, [](shardwise::communicator auto& world) {
    // Each family takes the largest grid of powers of two that fits the ranks and divides the model
    // (8 heads, width 32), so the example runs on any number of ranks; 8 use every rank in each.
    const int ranks = world.size();

    // 11. 1-D on up to 8 ranks (one head each at most), then the sequence-parallel MLP and projections
    //     on the same mesh, then the stack in the sequence-parallel family (nn/family.hpp): its blocks take
    //     and give activations cut by tokens, col_1d, and gather them inside each sub-block.
    const int heads = static_cast<int>(options.heads);
    const int line = power_of_two_up_to(std::min(ranks, heads));
    on_first(world, line, [&](auto& part) {
      shardwise::process_mesh mesh(part, {line});
      train<nn::tensor_parallel_1d<>>(mesh, "1-D");
      sequence_parallel_mlp(mesh);
      shared_input_projections(mesh);
      train<nn::sequence_parallel_1d<>>(mesh, "1-D, sequence-parallel");
    });

    // 12. 2-D on the largest square grid.
    int q = 1;
    while (4 * q * q <= ranks && 2 * q <= heads) q *= 2;
    on_first(world, q * q, [&](auto& part) {
      shardwise::process_mesh mesh(part, {q, q});
      train<nn::tensor_parallel_2d<>>(mesh, "2-D");
    });

    // 13. 3-D on a p x q x q grid (2x2x2 for 8 ranks, 1x2x2 for 4): the cube's diagonal needs its last
    //     two extents equal.
    const int side = ranks >= 4 ? 2 : 1;
    const int depth = ranks >= 2 * side * side ? 2 : 1;
    on_first(world, depth * side * side, [&](auto& part) {
      shardwise::process_mesh mesh(part, {depth, side, side});
      train<nn::tensor_parallel_3d<>>(mesh, "3-D");
    });
  });
}
