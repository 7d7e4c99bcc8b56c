// Every kernel has a cost: an operation's local compute is a kernel declaring its work (core/kernel.hpp),
// and on simulated GPUs it takes the roofline time of that work, launch_latency + max(flops / peak,
// bytes / bandwidth). Each test writes the expected work out from the formulas and checks the compute
// stream's end, on simulated MI210s and on the same GPU slowed so that the compute term decides.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ops/matmul_checks.hpp"
#include "shardwise/core/shared_buffer.hpp"
#include "shardwise/core/work.hpp"
#include "shardwise/fused/embedding_bag.hpp"
#include "shardwise/layout/cube_3d.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/mesh/data_parallel_mesh.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/nn/binary_cross_entropy.hpp"
#include "shardwise/ops/attention.hpp"
#include "shardwise/ops/dropout.hpp"
#include "shardwise/ops/gelu.hpp"
#include "shardwise/ops/layer_norm.hpp"
#include "shardwise/ops/matmul.hpp"
#include "shardwise/ops/softmax.hpp"
#include "shardwise/optim/adafactor.hpp"
#include "shardwise/optim/adam.hpp"
#include "shardwise/optim/rowwise_adagrad.hpp"
#include "shardwise/optim/sharded.hpp"
#include "shardwise/optim/sparse_update.hpp"
#include "shardwise/sim/presets.hpp"
#include "shardwise/sim/sim_gpu.hpp"
#include "shardwise/sim/timeline.hpp"
#include "shardwise/tensor/elementwise.hpp"
#include "shardwise/tensor/norm.hpp"

namespace {

using namespace shardwise;
using shardwise::testing::distributed;
using shardwise::testing::expect_equals_serial;
using shardwise::testing::serial;

constexpr int ranks = 4;
constexpr std::int64_t tokens = 1024;
constexpr std::int64_t hidden = 1024;
constexpr double element = sizeof(float);

// An element-wise operation is one kernel per rank (core/kernel.hpp) that takes the roofline time of the
// work it declares: GeLU reads and writes each of the rank's elements once and does 16 operations on
// each; its backward reads two tensors and does 24. On the MI210 both are memory-bound; on the same GPU
// slowed to 1 TFLOP/s, compute-bound, so both terms of the declared work are checked.
TEST(kernel_cost, gelu_and_its_backward_are_one_roofline_kernel_each) {
  for (const double peak_flops : {sim::presets::mi210().peak_flops, 1e12}) {
    sim::machine machine = sim::presets::mi210_nodes(ranks, ranks);
    machine.device.peak_flops = peak_flops;
    const double elements = static_cast<double>(tokens / ranks * hidden);
    const double forward = machine.device.duration({16 * elements, 2 * element * elements});
    const double backward = machine.device.duration({24 * elements, 3 * element * elements});
    const bool memory_bound = peak_flops > 2 * machine.device.memory_bandwidth;
    EXPECT_EQ(forward > machine.device.duration({0, 2 * element * elements}), !memory_bound);
    sim_gpu::run(ranks, machine, [&](sim_gpu::communicator& world) {
      process_mesh mesh(world, {ranks});
      const auto x = distributed<row_1d<>, float>(mesh, serial({tokens, hidden}, 1));
      auto& compute = world.device().default_stream();
      world.device().synchronize();
      const double start = std::max(compute.ready(), world.now());
      const auto y = gelu(x);
      EXPECT_NEAR(compute.ready(), start + forward, 1e-12 * forward) << peak_flops << " FLOP/s";
      (void)gelu_backward(y, x);
      EXPECT_NEAR(compute.ready(), start + forward + backward, 1e-12 * forward) << peak_flops << " FLOP/s";
      EXPECT_DOUBLE_EQ(world.now(), start) << "launching does not make the host wait";
    });
  }
}

// Every operation's kernels, forward and backward, on rows cut over the ranks (col_1d: no communication,
// so the compute stream runs them back to back): the stream's end is the sum of the roofline times of the
// kernels each operation declares, written out here from their formulas (n elements and r rows on a
// rank, s bytes each; the binary cross-entropy has r logits, one a row). On the MI210 most of them are
// memory-bound; slowed to 0.1 TFLOP/s, all are compute-bound, so both terms of every declared work are
// checked.
void expect_roofline_kernels(double peak_flops) {
  SCOPED_TRACE(std::to_string(peak_flops) + " FLOP/s");
  constexpr std::int64_t sequence = 64;
  constexpr std::int64_t head_dim = 32;
  sim::machine machine = sim::presets::mi210_nodes(ranks, ranks);
  machine.device.peak_flops = peak_flops;
  machine.device.float_matrix_flops = 0;  // attention's products at peak_flops too (their rate: below)
  const auto& device = machine.device;
  const double n = static_cast<double>(tokens / ranks * hidden);
  const double r = static_cast<double>(tokens / ranks);
  const double s = element;
  const auto time = [&](double flops, double bytes) { return device.duration({flops, bytes}); };
  const double row_reduction = time(n, s * (n + r));
  const double one_pass = time(n, 2 * s * n);
  const double tiles = static_cast<double>(tokens / ranks / sequence * (hidden / head_dim));
  const double q = sequence, d = head_dim;
  struct expected_kernels {
    const char* operation;
    double seconds;
  };
  const std::vector<expected_kernels> expected{
      {"softmax_rows", row_reduction + time(9 * n, 2 * s * n) + row_reduction + one_pass},
      {"softmax_rows_backward", time(n, s * (2 * n + r)) + time(2 * n, 3 * s * n)},
      {"layer_norm",
       row_reduction + one_pass + row_reduction + one_pass + 2 * time(n, s * (2 * n + static_cast<double>(hidden)))},
      {"dropout", time(16 * n, 2 * s * n)},
      {"attention_forward", time(tiles * (4 * q * q * d + 12 * q * q), tiles * s * (4 * q * d + q * q))},
      {"attention_backward", time(tiles * (8 * q * q * d + 4 * q * q), tiles * s * (7 * q * d + q * q))},
      {"binary_cross_entropy", time(34 * r, 4 * s * r) + time(2 * r, 3 * s * r)},
      {"scale", one_pass},
  };
  sim_gpu::run(ranks, machine, [&](sim_gpu::communicator& world) {
    process_mesh mesh(world, {ranks});
    const auto x = distributed<col_1d<>, float>(mesh, serial({tokens, hidden}, 1));
    const auto dy = distributed<col_1d<>, float>(mesh, serial({tokens, hidden}, 2));
    const auto ones = from_function<replicated<>>(mesh, {1, hidden}, [](std::int64_t, std::int64_t) { return 1.0f; });
    const auto logits = distributed<col_1d<>, float>(mesh, serial({tokens, 1}, 3));
    auto scaled = distributed<col_1d<>, float>(mesh, serial({tokens, hidden}, 4));
    const std::vector<float> labels(static_cast<std::size_t>(tokens / ranks), 1.0f);
    nn::binary_cross_entropy<float, col_1d<>, std::remove_reference_t<decltype(mesh)>> loss;
    const attention_shape shape{sequence, head_dim, true};
    attention_saved<float> saved;
    auto& compute = world.device().default_stream();
    for (const auto& [operation, seconds] : expected) {
      world.device().synchronize();
      const double start = std::max(compute.ready(), world.now());
      const std::string name = operation;
      if (name == "softmax_rows") (void)softmax_rows(x);
      if (name == "softmax_rows_backward") (void)softmax_rows_backward(dy, x);
      if (name == "layer_norm") (void)layer_norm(x, ones, ones);
      if (name == "dropout") (void)dropout(x, 0.1, 7);
      if (name == "attention_forward") (void)attention_forward(x, x, x, shape, saved);
      if (name == "attention_backward") (void)attention_backward(x, x, x, dy, shape, saved);
      if (name == "binary_cross_entropy") {
        (void)loss.forward(logits, labels);
        (void)loss.backward(1.0f);
      }
      if (name == "scale") scale(scaled, 2.0f);
      EXPECT_NEAR(compute.ready() - start, seconds, 1e-9 * seconds) << operation;
    }
  });
}

TEST(kernel_cost, each_operation_takes_the_roofline_time_of_its_kernels) {
  expect_roofline_kernels(sim::presets::mi210().peak_flops);
  expect_roofline_kernels(1e11);
}

// A product runs on the device's matrix units for its operands' precision (the MI210's matrix cores:
// 181 TFLOP/s for bf16, 45.3 for float, against 22.6 FP32 on its vector units), the rest of a kernel's
// operations at the FP32 rate. Checked on a 1-D product's local GEMM (replicated · row_1d, no
// communication) and on attention's forward, whose scores and weighted sum are products and whose
// softmax is not.
template <class T>
void expect_products_priced_for(double product_flops_per_second) {
  SCOPED_TRACE((std::is_same_v<T, bf16> ? "bf16" : "float"));
  constexpr std::int64_t m = 512, k = 1024, n = 2048;
  constexpr std::int64_t sequence = 512, head_dim = 128, heads = 2;
  const sim::machine machine = sim::presets::mi210_nodes(ranks, ranks);
  const auto& gpu = machine.device;
  const auto seconds = [&](double products, double others, double bytes) {
    return gpu.launch_latency +
           std::max(products / product_flops_per_second + others / gpu.peak_flops, bytes / gpu.memory_bandwidth);
  };
  const double s = sizeof(T);
  const double columns = static_cast<double>(n / ranks);
  const double gemm = seconds(2.0 * m * columns * k, 0, s * (m * k + k * columns + m * columns));
  const double q = sequence, d = head_dim, tiles = heads;  // a sequence of each head on each rank
  const double attention = seconds(tiles * 4 * q * q * d, tiles * 12 * q * q, tiles * s * (4 * q * d + q * q));
  // Both compute-bound, so the rate of the products decides.
  EXPECT_GT(gemm, gpu.launch_latency + s * (m * k + k * columns + m * columns) / gpu.memory_bandwidth);
  EXPECT_GT(attention, gpu.launch_latency + tiles * s * (4 * q * d + q * q) / gpu.memory_bandwidth);
  sim_gpu::run(ranks, machine, [&](sim_gpu::communicator& world) {
    process_mesh mesh(world, {ranks});
    const auto x = distributed<replicated<>, T>(mesh, serial({m, k}, 1));
    const auto w = distributed<row_1d<>, T>(mesh, serial({k, n}, 2));
    const auto q_k_v = distributed<col_1d<>, T>(mesh, serial({ranks * sequence, heads * head_dim}, 3));
    attention_saved<T> saved;
    auto& compute = world.device().default_stream();
    world.device().synchronize();
    double start = std::max(compute.ready(), world.now());
    (void)matmul(x, w);
    EXPECT_NEAR(compute.ready() - start, gemm, 1e-9 * gemm);
    world.device().synchronize();
    start = std::max(compute.ready(), world.now());
    (void)attention_forward(q_k_v, q_k_v, q_k_v, attention_shape{sequence, head_dim, true}, saved);
    EXPECT_NEAR(compute.ready() - start, attention, 1e-9 * attention);
  });
}

TEST(kernel_cost, products_run_on_the_matrix_units_of_their_precision_and_the_rest_at_the_fp32_rate) {
  const sim::device_model mi210 = sim::presets::mi210();
  EXPECT_GT(mi210.bf16_matrix_flops, 4 * mi210.peak_flops);
  EXPECT_GT(mi210.float_matrix_flops, 1.5 * mi210.peak_flops);
  expect_products_priced_for<bf16>(mi210.bf16_matrix_flops);
  expect_products_priced_for<float>(mi210.float_matrix_flops);
  // A device without matrix units for a precision (the V100: none; the A100: none for float, as PyTorch
  // leaves TF32 off) runs its products at the one rate; double products run there on every device.
  const sim::device_model v100 = sim::presets::v100(), a100 = sim::presets::a100();
  EXPECT_EQ(v100.bf16_matrix_flops, 0);
  EXPECT_EQ(a100.float_matrix_flops, 0);
  for (const auto& [device, product] :
       {std::pair{v100, gemm_work<bf16>(1024, 1024, 1024)}, std::pair{v100, gemm_work<float>(1024, 1024, 1024)},
        std::pair{a100, gemm_work<float>(1024, 1024, 1024)}, std::pair{mi210, gemm_work<double>(1024, 1024, 1024)}})
    EXPECT_DOUBLE_EQ(
        device.duration(product),
        device.launch_latency + std::max(product.flops / device.peak_flops, product.bytes / device.memory_bandwidth));
}

// The optimizer's update is one kernel over the elements a rank updates, priced by its memory traffic:
// the gradient read, the weight and Adam's two moments read and written, 28 bytes an element. One rank,
// so the step's collectives take no time and the kernel is all the compute stream does.
TEST(kernel_cost, the_optimizer_update_is_one_kernel_over_the_elements_a_rank_updates) {
  const std::vector<optim::parameter_shape> shapes{{64, 32}, {1, 32}};
  const sim::machine machine = sim::presets::mi210_nodes(1, 1);
  const double elements = 64 * 32 + 32;
  const double update = machine.device.duration({0, elements * element * (3 + 2 * 2)});
  sim_gpu::run(1, machine, [&](sim_gpu::communicator& world) {
    optim::sharded_update<optim::adam> sharded(world, shapes);
    auto& compute = world.device().default_stream();
    world.device().synchronize();
    const double start = std::max(compute.ready(), world.now());
    sharded.step(world, 1e-3f);
    EXPECT_NEAR(compute.ready(), start + update, 1e-12 * update);
  });
}

// The durations of the events named `name` on `timeline`, in seconds, read from its trace.
std::vector<double> durations_of(const sim::timeline& timeline, const std::string& name) {
  const std::string trace = timeline.chrome_trace_json();
  const std::string named = "\"name\":\"" + name + "\"";
  const std::string duration = "\"dur\":";
  std::vector<double> found;
  for (auto at = trace.find(named); at != std::string::npos; at = trace.find(named, at + 1))
    found.push_back(1e-6 * std::stod(trace.substr(trace.find(duration, at) + duration.size())));
  return found;
}

// Expects `count` events named `name` on `timeline`, each lasting `seconds`.
void expect_kernels(const sim::timeline& timeline, const std::string& name, std::size_t count, double seconds) {
  const std::vector<double> found = durations_of(timeline, name);
  EXPECT_EQ(found.size(), count) << name;
  for (const double measured : found) EXPECT_NEAR(measured, seconds, 1e-9 * seconds) << name;
}

// A node of `gpus` MI210s that records its timeline, so that each kernel's time can be read off it.
sim::machine traced_node(int gpus) {
  sim::machine machine = sim::presets::mi210_nodes(gpus, gpus);
  machine.record_timeline = true;
  return machine;
}

// Adafactor's finish of each round, from the complete sums to its factored moments, is one kernel over
// every tensor: each sum read (a double), the tensor state (each tensor's rows, columns and their mean)
// read and written, two operations on each state value. Round 0 has a sum for every state value, round 1
// one a tensor.
TEST(kernel_cost, the_finish_of_each_round_of_statistics_is_one_kernel) {
  const std::vector<optim::parameter_shape> shapes{{64, 32}, {1, 32}};
  const sim::machine machine = traced_node(1);
  const auto report = sim_gpu::run(1, machine, [&](sim_gpu::communicator& world) {
    optim::sharded_update<optim::adafactor> update(world, shapes);
    update.step(world, 1e-3f);
  });
  const double state = (64 + 32 + 1) + (1 + 32 + 1);
  const auto finish = [&](double sums) {
    return machine.device.duration({2 * state, sizeof(double) * sums + 2 * element * state});
  };
  const std::vector<double> finished = durations_of(*report.timeline, "optimizer statistics finish");
  ASSERT_EQ(finished.size(), 2U);
  EXPECT_NEAR(finished[0], finish(state), 1e-9 * finish(state));
  EXPECT_NEAR(finished[1], finish(2), 1e-9 * finish(2));
}

// The 3-D product in bands copies where a band's rows do not lie together, each copy a kernel that reads
// and writes its elements once. On a 1 x 2 x 1 mesh, C = A·B's local product has two strips (A's two
// pieces along y) that z's one rank keeps, so each rank copies its m x n/2 block of sums into place once;
// dB = Aᵀ·dC copies each band of A's columns, m/2 x k/bands, before sending it.
TEST(kernel_cost, the_3d_product_in_bands_copies_its_bands_in_one_kernel_each) {
  constexpr int pair = 2;
  constexpr int bands = 4;
  constexpr std::int64_t m = 1024, k = 512, n = 512;
  const sim::machine machine = traced_node(pair);
  const auto a = serial({m, k}, 1);
  const auto b = serial({k, n}, 2);
  const auto dc = serial({m, n}, 3);
  const auto report = sim_gpu::run(pair, machine, [&](sim_gpu::communicator& world) {
    process_mesh mesh(world, {1, pair, 1});
    const auto a_input = distributed<cube_3d<>::input, float>(mesh, a);
    const auto b_weight = distributed<cube_3d<>::weight, float>(mesh, b);
    const auto dc_output = distributed<cube_3d<>::output, float>(mesh, dc);
    expect_equals_serial(matmul(a_input, b_weight, {.chunks = bands}), a * b, 1e-5);
    expect_equals_serial(matmul(transposed(a_input), dc_output, {.chunks = bands}), a.transpose() * dc, 1e-5);
  });
  const auto copy_time = [&](double elements) { return machine.device.duration(copy_work(element * elements)); };
  const double sums = copy_time(m * n / pair);
  const double band_of_a = copy_time(m / pair * k / bands);
  expect_kernels(*report.timeline, "band sums copy", pair, sums);
  expect_kernels(*report.timeline, "band of A copy", pair * bands, band_of_a);
}

// A tensor's copy is a kernel too: copying it, binding it to a buffer and assigning into a bound
// tensor each read and write the rank's elements once, so each takes a copy's roofline time.
TEST(kernel_cost, copying_a_tensor_is_one_copy_kernel) {
  const sim::machine machine = traced_node(ranks);
  const auto whole = serial({tokens, hidden}, 1);
  const auto report = sim_gpu::run(ranks, machine, [&](sim_gpu::communicator& world) {
    process_mesh mesh(world, {ranks});
    const auto x = distributed<row_1d<>, float>(mesh, whole);
    auto copy = x;
    expect_equals_serial(copy, whole, 1e-6);
    copy.bind(shared_buffer<float>::zeros(x.data().size()));
    copy = x;
    expect_equals_serial(copy, whole, 1e-6);
  });
  const double copy_time = machine.device.duration(copy_work(element * tokens / ranks * hidden));
  for (const char* name : {"dtensor copy", "dtensor::bind copy", "dtensor::operator= copy"})
    expect_kernels(*report.timeline, name, ranks, copy_time);
}

// The Frobenius norm's local sum of squares is one kernel, two operations on each of the rank's
// elements, read once (its all-reduce follows it on the stream, so its kernel is read off the trace).
TEST(kernel_cost, the_frobenius_norm_sums_its_squares_in_one_kernel) {
  const sim::machine machine = traced_node(ranks);
  const auto whole = serial({tokens, hidden}, 1);
  const auto report = sim_gpu::run(ranks, machine, [&](sim_gpu::communicator& world) {
    process_mesh mesh(world, {ranks});
    EXPECT_NEAR(frobenius_norm(distributed<row_1d<>, float>(mesh, whole)), whole.norm(), 1e-6 * whole.norm());
  });
  const double elements = static_cast<double>(tokens / ranks * hidden);
  const double expected = machine.device.duration({2 * elements, element * elements});
  expect_kernels(*report.timeline, "frobenius norm", ranks, expected);
}

// The embedding bag layer places the pooled rows it receives in its output, every table's columns side
// by side, adding a row-wise table's pieces, in one kernel, and cuts the output's gradient into the
// pieces' columns in another. A rank receives, for each of its samples, each table-wise table's
// columns once and a row-wise table's once from every rank: that kernel reads those and writes the
// output once, adding all but a table's first piece; the gradient's reads the output's gradient once
// and writes the pieces' columns once. The sparse update of the pieces that follows is one kernel too:
// each touched row's gradient read, its weights and its state (one value, row-wise Adagrad's) read and
// written.
TEST(kernel_cost, the_embedding_bag_layer_and_its_sparse_update_are_one_kernel_each) {
  const std::vector<fused::embedding_table> tables = {{80, 8, fused::table_sharding::table_wise},
                                                      {80, 8, fused::table_sharding::table_wise},
                                                      {80, 8, fused::table_sharding::table_wise},
                                                      {80, 8, fused::table_sharding::table_wise},
                                                      {80, 4, fused::table_sharding::row_wise}};
  constexpr std::int64_t batch = 64;
  const sim::machine machine = traced_node(ranks);
  std::vector<double> updating(ranks);
  const auto report = sim_gpu::run(ranks, machine, [&](sim_gpu::communicator& world) {
    data_parallel_mesh mesh(world, ranks, {1});
    using local_mesh = std::remove_cvref_t<decltype(mesh.tensor_parallel())>;
    fused::embedding_bag<float, sim_gpu::communicator, local_mesh> layer(mesh.data(), mesh.tensor_parallel(), tables,
                                                                         batch, 1);
    // Bags of one lookup, rows 0, 20, 40 and 60 in turn: a row in each rank's piece of the row-wise table.
    std::vector<std::int64_t> offsets(batch + 1), indices(batch);
    std::iota(offsets.begin(), offsets.end(), 0);
    for (std::int64_t b = 0; b < batch; ++b) indices[static_cast<std::size_t>(b)] = b % 4 * 20;
    const std::vector<fused::embedding_bags> bags(layer.input_tables().size(), {offsets, indices});
    const auto out = layer.forward(bags);
    layer.backward(out);
    double touched_rows = 0, touched_elements = 0;
    layer.for_each_sparse_parameter([&](const std::string&, nn::sparse_parameter<float>& p) {
      touched_rows += static_cast<double>(p.gradient.touched().size());
      touched_elements += static_cast<double>(p.gradient.touched().size()) * p.dimension();
    });
    EXPECT_GT(touched_rows, 0);
    updating[static_cast<std::size_t>(world.rank())] =
        machine.device.duration({0, element * (3 * touched_elements + 2 * touched_rows)});
    optim::sparse_update<optim::rowwise_adagrad> update(layer);
    update.step(world, 0.1f);
  });
  const double rows = static_cast<double>(batch / ranks);
  const double output_elements = rows * (4 * 8 + 4), received_elements = rows * (4 * 8 + ranks * 4);
  const double placing =
      machine.device.duration({received_elements - output_elements, element * (received_elements + output_elements)});
  const double cutting = machine.device.duration({0, element * (output_elements + received_elements)});
  expect_kernels(*report.timeline, "embedding bag output", ranks, placing);
  expect_kernels(*report.timeline, "embedding bag gradient", ranks, cutting);
  std::vector<double> updated = durations_of(*report.timeline, "sparse optimizer update");
  ASSERT_EQ(updated.size(), ranks);
  std::ranges::sort(updated);
  std::ranges::sort(updating);
  for (int r = 0; r < ranks; ++r)
    EXPECT_NEAR(updated[static_cast<std::size_t>(r)], updating[static_cast<std::size_t>(r)],
                1e-9 * updating[static_cast<std::size_t>(r)]);
}

}  // namespace
