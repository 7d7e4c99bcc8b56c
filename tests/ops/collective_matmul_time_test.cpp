// Collective matmul's overlap in modelled time, on simulated MI210s (sim_gpu, one node of 4 GPUs joined
// by xGMI): the rings' GEMMs are kernels on the compute stream and their messages travel on the
// communication stream meanwhile, both ways round the ring at once. all_gather_matmul's step s (0 to
// P / 2) multiplies the pieces that arrived, one or two, while the next travel, and takes
//   max(GEMMs, t)  (g a piece's GEMM, t a piece's transfer; the last step its GEMMs alone)
// and matmul_reduce_scatter's steps take as long, plus an addition a per sum received, where the
// unfused sequence (the collective, then one GEMM, or the reverse) takes the sum of the two. Both are
// checked where a piece's GEMM and transfer are alike and where transfers outlast two GEMMs (there a
// ring one way round would take (P - 1) · t + g). all_gather_matmul_both_sides multiplies each piece
// into two products, so its steps take max(both GEMMs, t). The 3-D product pipelined in bands
// (matmul_options::chunks), each of its forms on a 2x2x2 cube of one node of 8, takes
//   max(r, p) + n · g + s          (n bands; r: the right operand's all-gather, whole; p, g, s: one
//                                   band's all-gather of the left operand, GEMMs, reduce-scatter)
// when a band's GEMMs take longer than its transfers, against max(r, P) + G + S in one band; dB, which
// copies each rank's piece of a band of A together first (a kernel c), takes
//   max(r, c + p) + n · g + (n - 2) · c + s.
// Every figure is derived here from the machine model; the results equal the serial Eigen product.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ops/matmul_checks.hpp"
#include "shardwise/core/work.hpp"
#include "shardwise/layout/cube_3d.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/ops/collective_matmul.hpp"
#include "shardwise/ops/collective_matmul_choice.hpp"
#include "shardwise/ops/matmul.hpp"
#include "shardwise/sim/presets.hpp"
#include "shardwise/sim/sim_gpu.hpp"

namespace {

using namespace shardwise;
using shardwise::testing::distributed;
using shardwise::testing::expect_equals_serial;
using shardwise::testing::matrix;
using shardwise::testing::serial;

// A Megatron MLP's two products on a sequence-parallel block: tokens x hidden -> tokens x ffn -> back,
// with a wide MLP (a piece's GEMM and transfer alike) and a narrow one (transfers the longer).
constexpr std::int64_t tokens = 1024;
constexpr std::int64_t hidden = 1024;
constexpr std::array<std::int64_t, 2> ffn_widths{2048, 256};
constexpr double element = sizeof(float);
constexpr double float_tolerance = 1e-5;

// The kernel the local product launches for an m x n result with inner dimension k (added to the result
// when `accumulate`): products of floats, on the MI210's matrix cores.
double gemm_time(const sim::machine& machine, double m, double n, double k, bool accumulate = false) {
  const double flops = 2 * m * n * k;
  return machine.device.duration({.flops = flops,
                                  .bytes = element * (m * k + k * n + (accumulate ? 2 : 1) * m * n),
                                  .float_product_flops = flops});
}

// One message of `bytes` from GPU 1 to GPU 0 (every pair of the node is alike), alone on its route.
double transfer_time(const sim::machine& machine, double bytes) {
  const sim::transfer message{1, 0, bytes, 0};
  return sim::simulate(machine.network, std::span(&message, 1), false).finish();
}

double collective_time(const sim::machine& machine, int ranks, sim::collective kind, double bytes) {
  sim::collective_cost costs(machine);
  std::vector<int> devices;
  for (int r = 0; r < ranks; ++r) devices.push_back(r);
  return costs.duration(costs.group_id(devices), devices, {kind, bytes, 0});
}

// The two-way ring's time: P / 2 + 1 steps. A step multiplies `gemms(s)` pieces, beside one piece (or
// sum) travelling each way when `travels(s)`, then adds `additions(s)` received sums.
template <class Gemms, class Travels, class Additions>
double two_way_ring_time(int ranks, double gemm, double transfer, double addition, Gemms&& gemms, Travels&& travels,
                         Additions&& additions) {
  double time = 0;
  for (int step = 0; step <= ranks / 2; ++step) {
    const double computing = gemms(step) * gemm;
    time += (travels(step) ? std::max(computing, transfer) : computing) + additions(step) * addition;
  }
  return time;
}

// all_gather_matmul: step s multiplies the pieces of ranks r + s and (from step 1 to (P - 1) / 2) r - s
// while the next ones travel, but on the last step.
double all_gather_ring_time(int ranks, double gemm, double transfer) {
  const int behind = (ranks - 1) / 2;
  return two_way_ring_time(
      ranks, gemm, transfer, 0, [&](int step) { return step == 0 ? 1 : 1 + (step <= behind ? 1 : 0); },
      [&](int step) { return step < ranks / 2; }, [](int) { return 0; });
}

// matmul_reduce_scatter: the sums coming from the P / 2 ranks after r pass through every step; those
// from the (P - 1) / 2 before it start late enough to arrive on the last step too, where r adds its own
// share to both. A step's GEMMs run while the sums sent on the step before travel.
double reduce_scatter_ring_time(int ranks, double gemm, double transfer, double addition) {
  const int steps = ranks / 2;
  const int behind = (ranks - 1) / 2;
  const int behind_starts = steps - behind;
  return two_way_ring_time(
      ranks, gemm, transfer, addition,
      [&](int step) { return step == steps ? 1 : 1 + (step >= behind_starts ? 1 : 0); },
      [](int step) { return step > 0; },
      [&](int step) {
        if (step == steps) return 1 + (behind > 0 ? 1 : 0);
        return (step > 0 ? 1 : 0) + (step > behind_starts ? 1 : 0);
      });
}

// The kernel adding a received sum of `elements` into this rank's: both read, the sum written.
double addition_time(const sim::machine& machine, double elements) {
  return machine.device.duration({elements, 3 * element * elements});
}

// The kernel copying `elements` (read and written once).
double copy_time(const sim::machine& machine, double elements) {
  return machine.device.duration(copy_work(element * elements));
}

// `product()`, whose modelled time, the slowest rank's from a moment every rank shares to the end of its
// kernels, goes to `slowest`. `elapsed` has a place for every rank.
template <class Product>
auto timed(sim_gpu::communicator& world, std::vector<double>& elapsed, double& slowest, Product&& product) {
  world.device().synchronize();
  world.barrier();
  const double start = world.now();
  auto result = product();
  world.device().synchronize();
  elapsed[static_cast<std::size_t>(world.rank())] = world.now() - start;
  world.barrier();
  slowest = *std::max_element(elapsed.begin(), elapsed.end());
  return result;
}

// Runs `body(mesh)` on P GPUs with collectives and messages on a communication stream of their own.
template <class Body>
void on_one_node(int ranks, Body&& body) {
  sim_gpu::run(ranks, sim::presets::mi210_nodes(ranks, ranks), [&](sim_gpu::communicator& world) {
    world.use_stream(world.device().create_stream("communication"));
    process_mesh mesh(world, {ranks});
    body(world, mesh);
  });
}

constexpr int ranks = 4;

// What the machine model predicts for one product: a piece's GEMM and transfer, the ring and the unfused
// sequence.
struct prediction {
  double gemm;
  double transfer;
  double ring;
  double unfused;
};

// On 4 GPUs: operands = operands_on(mesh); product(operands, form) in the ring form, run once unmeasured
// (it makes the mesh's private axis), then measured, and in the unfused form, measured; every result
// equals `expected`, and the modelled times are the predicted ones. Then a collective_matmul_choice left
// to choose keeps the form the model predicts faster, after one call of each.
template <class Operands, class Product>
void expect_overlap(const matrix& expected, const prediction& predicted, Operands&& operands_on, Product&& product) {
  std::vector<double> elapsed(ranks);
  double ring_time_measured = 0;
  double unfused_time_measured = 0;
  collective_matmul_form chosen = collective_matmul_form::automatic;
  on_one_node(ranks, [&](sim_gpu::communicator& world, auto& mesh) {
    const auto operands = operands_on(mesh);
    const auto in = [&](collective_matmul_form form) { return product(operands, form); };
    expect_equals_serial(in(collective_matmul_form::ring), expected, float_tolerance);
    expect_equals_serial(timed(world, elapsed, ring_time_measured, [&] { return in(collective_matmul_form::ring); }),
                         expected, float_tolerance);
    expect_equals_serial(
        timed(world, elapsed, unfused_time_measured, [&] { return in(collective_matmul_form::unfused); }), expected,
        float_tolerance);
    collective_matmul_choice choice(collective_matmul_form::automatic);
    for (int call = 0; call < 2; ++call) expect_equals_serial(choice(world, in), expected, float_tolerance);
    if (world.rank() == 0) chosen = choice.form();
  });
  EXPECT_NEAR(unfused_time_measured, predicted.unfused, 1e-3 * predicted.unfused);
  EXPECT_NEAR(ring_time_measured, predicted.ring, 1e-3 * predicted.ring)
      << "GEMM " << predicted.gemm << " s, transfer " << predicted.transfer << " s";
  // The ring is faster where the model says it is: the additions of matmul_reduce_scatter's received sums
  // (a launch each) can cost it more than the overlap saves.
  EXPECT_EQ(ring_time_measured < unfused_time_measured, predicted.ring < predicted.unfused)
      << "ring " << ring_time_measured << " s, unfused " << unfused_time_measured << " s";
  EXPECT_EQ(chosen,
            predicted.ring <= predicted.unfused ? collective_matmul_form::ring : collective_matmul_form::unfused);
}

// Where transfers outlast two GEMMs, a ring one way round, (P - 1) transfers and a GEMM (and its
// additions), would take longer: the shape tells the two apart.
void expect_two_ways_count(std::int64_t ffn, const prediction& predicted, double additions) {
  if (ffn != ffn_widths[1]) return;
  ASSERT_GT(predicted.transfer, 2 * predicted.gemm);
  EXPECT_LT(predicted.ring, (ranks - 1) * predicted.transfer + predicted.gemm + additions);
}

TEST(collective_matmul_time, all_gather_matmul_overlaps_each_transfer_with_a_gemm) {
  const sim::machine machine = sim::presets::mi210_nodes(ranks, ranks);
  for (const std::int64_t ffn : ffn_widths) {
    SCOPED_TRACE("MLP width " + std::to_string(ffn));
    const double rows = static_cast<double>(tokens) / ranks;
    const double columns = static_cast<double>(ffn) / ranks;
    const double piece_bytes = rows * hidden * element;
    const double gemm = gemm_time(machine, rows, columns, hidden);
    const double transfer = transfer_time(machine, piece_bytes);
    const prediction predicted{gemm, transfer, all_gather_ring_time(ranks, gemm, transfer),
                               collective_time(machine, ranks, sim::collective::all_gather, piece_bytes) +
                                   gemm_time(machine, tokens, columns, hidden)};
    expect_two_ways_count(ffn, predicted, 0);
    const matrix x = serial({tokens, hidden}, 1);
    const matrix w = serial({hidden, ffn}, 2);
    expect_overlap(
        x * w, predicted,
        [&](auto& mesh) {
          return std::pair(distributed<col_1d<>, float>(mesh, x), distributed<row_1d<>, float>(mesh, w));
        },
        [](const auto& xw, collective_matmul_form form) { return all_gather_matmul(xw.first, xw.second, form); });
  }
}

TEST(collective_matmul_time, matmul_reduce_scatter_overlaps_each_transfer_with_a_gemm) {
  const sim::machine machine = sim::presets::mi210_nodes(ranks, ranks);
  for (const std::int64_t ffn : ffn_widths) {
    SCOPED_TRACE("MLP width " + std::to_string(ffn));
    const double rows = static_cast<double>(tokens) / ranks;
    const double inner = static_cast<double>(ffn) / ranks;
    const double piece_bytes = rows * hidden * element;
    const double gemm = gemm_time(machine, rows, hidden, inner);
    const double transfer = transfer_time(machine, piece_bytes);
    const double addition = addition_time(machine, rows * hidden);
    const prediction predicted{gemm, transfer, reduce_scatter_ring_time(ranks, gemm, transfer, addition),
                               gemm_time(machine, tokens, hidden, inner) +
                                   collective_time(machine, ranks, sim::collective::reduce_scatter, piece_bytes)};
    expect_two_ways_count(ffn, predicted, (ranks - 1) * addition);
    const matrix h = serial({tokens, ffn}, 3);
    const matrix v = serial({ffn, hidden}, 4);
    expect_overlap(
        h * v, predicted,
        [&](auto& mesh) {
          return std::pair(distributed<row_1d<>, float>(mesh, h), distributed<col_1d<>, float>(mesh, v));
        },
        [](const auto& hv, collective_matmul_form form) { return matmul_reduce_scatter(hv.first, hv.second, form); });
  }
}

// all_gather_matmul_both_sides, the backward of the MLP's second linear: dz's pieces travel once, and
// each step multiplies each piece it holds into both dh = gather(dz)·Vᵀ and dV = hᵀ·gather(dz) (the
// first of dV's GEMMs writes, the others add), so a step takes max(both products' GEMMs, t); both rings
// alone would pay their transfers twice.
TEST(collective_matmul_time, all_gather_matmul_both_sides_gathers_once_for_two_products) {
  const sim::machine machine = sim::presets::mi210_nodes(ranks, ranks);
  for (const std::int64_t ffn : ffn_widths) {
    SCOPED_TRACE("MLP width " + std::to_string(ffn));
    const double rows = static_cast<double>(tokens) / ranks;
    const double columns = static_cast<double>(ffn) / ranks;
    const double transfer = transfer_time(machine, rows * hidden * element);
    const double dh_gemm = gemm_time(machine, rows, columns, hidden);
    const double dv_first = gemm_time(machine, columns, hidden, rows);
    const double dv_gemm = gemm_time(machine, columns, hidden, rows, true);
    const int behind = (ranks - 1) / 2;
    // (A GEMM of 1: gemms(s) gives step s's GEMM time itself.)
    const double predicted = two_way_ring_time(
        ranks, 1, transfer, 0,
        [&](int step) {
          const int pieces = step == 0 ? 1 : 1 + (step <= behind ? 1 : 0);
          return pieces * dh_gemm + (step == 0 ? dv_first : pieces * dv_gemm);
        },
        [&](int step) { return step < ranks / 2; }, [](int) { return 0; });
    const double two_rings =
        all_gather_ring_time(ranks, dh_gemm, transfer) + all_gather_ring_time(ranks, dv_gemm, transfer);

    const matrix h = serial({tokens, ffn}, 3);
    const matrix v = serial({ffn, hidden}, 4);
    const matrix dz = serial({tokens, hidden}, 5);
    std::vector<double> elapsed(ranks);
    double both_sides = 0;
    double one_by_one = 0;
    on_one_node(ranks, [&](sim_gpu::communicator& world, auto& mesh) {
      const auto h_columns = distributed<row_1d<>, float>(mesh, h);
      const auto v_rows = distributed<col_1d<>, float>(mesh, v);
      const auto dz_rows = distributed<col_1d<>, float>(mesh, dz);
      const auto once = [&] {
        return all_gather_matmul_both_sides(transposed(h_columns), dz_rows, transposed(v_rows));
      };
      (void)once();  // makes the mesh's private axis
      const auto [dv, dh] = timed(world, elapsed, both_sides, once);
      expect_equals_serial(dv, h.transpose() * dz, float_tolerance);
      expect_equals_serial(dh, dz * v.transpose(), float_tolerance);
      (void)timed(world, elapsed, one_by_one, [&] {
        return std::pair(all_gather_matmul(transposed(h_columns), dz_rows),
                         all_gather_matmul(dz_rows, transposed(v_rows)));
      });
    });
    EXPECT_NEAR(both_sides, predicted, 1e-3 * predicted)
        << "GEMMs " << dh_gemm << " + " << dv_gemm << " s, transfer " << transfer << " s";
    // Where GEMMs set the pace a second gather costs nothing; where transfers do, it costs them again.
    if (ffn == ffn_widths[1]) {
      ASSERT_GT(transfer, dh_gemm + dv_gemm);
      EXPECT_LT(both_sides, one_by_one);
      EXPECT_LT(predicted, two_rings);
    } else {
      EXPECT_LE(both_sides, one_by_one * (1 + 1e-3));
    }
  }
}

// The 3-D product: the second product of an MLP, T token rows of `cube_inputs` times a
// cube_inputs x cube_outputs weight, on a 2x2x2 cube (the paper's directions: A gathered over y, B over
// x, the sums over z), in 4 bands.
constexpr int cube_ranks = 8;
constexpr std::int64_t cube_tokens = 8192;
constexpr std::int64_t cube_inputs = 2048;
constexpr std::int64_t cube_outputs = 1024;
constexpr int cube_bands = 4;

// One form's pipeline in n bands, from the machine model: the right operand's whole all-gather, and one
// band's all-gather of the left operand, GEMMs (a kernel per tile), reduce-scatter, and the kernel copying
// this rank's piece of a band together where its rows do not lie together (0 where they do). Each axis
// has a stream of its own (sim_gpu gives each communicator split off a side stream one). Without
// copies both gathers start at once; with them the first band's gather waits for its copy, while B's
// travels on its own axis's stream. The second band's copy runs while the first band travels (which
// outlasts a copy), and while B's does where that is the longer (dB here: the product waits for B
// after starting the second band); every later one between two bands' GEMMs. One band is the plain
// product, which copies nothing.
struct pipeline_step {
  double right_gather;
  double left_gather;
  double gemms;
  double scatter;
  double copy = 0;
  [[nodiscard]] double time(int bands) const {
    const bool copies = bands > 1 && copy > 0;
    const double start = std::max(right_gather, (copies ? copy : 0) + left_gather);
    return start + bands * gemms + std::max(bands - 2, 0) * copy + scatter;
  }
};

// Every axis of the cube has 2 GPUs of the one node, every pair alike.
double block_collective(const sim::machine& machine, sim::collective kind, double rows, double cols) {
  return collective_time(machine, 2, kind, rows * cols * element);
}

// form(a, b, dc, options), a: T x inputs, b: inputs x outputs, dc: T x outputs, with one band and with
// cube_bands, each measured: both results equal `expected`, both times are step_for(machine, bands)'s,
// and the pipeline takes less time than the plain product.
template <class Form, class Predict>
void expect_pipeline(const matrix& expected, Form&& form, Predict&& step_for) {
  const sim::machine machine = sim::presets::mi210_nodes(cube_ranks, cube_ranks);
  const matrix a = serial({cube_tokens, cube_inputs}, 1);
  const matrix b = serial({cube_inputs, cube_outputs}, 2);
  const matrix dc = serial({cube_tokens, cube_outputs}, 3);
  std::vector<double> elapsed(cube_ranks);
  double plain = 0;
  double pipelined = 0;
  sim_gpu::run(cube_ranks, machine, [&](sim_gpu::communicator& world) {
    world.use_stream(world.device().create_stream("communication"));
    process_mesh mesh(world, {2, 2, 2});
    const auto a_input = distributed<cube_3d<>::input, float>(mesh, a);
    const auto b_weight = distributed<cube_3d<>::weight, float>(mesh, b);
    const auto dc_output = distributed<cube_3d<>::output, float>(mesh, dc);
    for (const int chunks : {1, cube_bands})
      expect_equals_serial(timed(world, elapsed, chunks == 1 ? plain : pipelined,
                                 [&] { return form(a_input, b_weight, dc_output, matmul_options{.chunks = chunks}); }),
                           expected, float_tolerance);
  });
  const pipeline_step whole = step_for(machine, 1);
  const pipeline_step band = step_for(machine, cube_bands);
  // The formula holds while the GEMMs set the pace: each band's outlast its transfers.
  ASSERT_GT(band.gemms, band.left_gather);
  ASSERT_GT(band.gemms, band.scatter);
  ASSERT_GT(band.right_gather, band.copy);
  ASSERT_GT(band.left_gather, band.copy);
  EXPECT_NEAR(plain, whole.time(1), 1e-3 * whole.time(1));
  EXPECT_NEAR(pipelined, band.time(cube_bands), 1e-3 * band.time(cube_bands))
      << "band: GEMMs " << band.gemms << " s, left all-gather " << band.left_gather << " s, reduce-scatter "
      << band.scatter << " s; right all-gather " << band.right_gather << " s";
  EXPECT_LT(pipelined, plain);
  // The figures, in the XML report (--gtest_output=xml).
  ::testing::Test::RecordProperty("plain_us", std::to_string(plain * 1e6));
  ::testing::Test::RecordProperty("pipelined_us", std::to_string(pipelined * 1e6));
}

// The dimensions, M x K times K x N, as the predictions below write them.
constexpr double m = cube_tokens, k = cube_inputs, n = cube_outputs;

// C = A·B: bands of A's rows gathered over y, multiplied by B in two tiles of columns, summed over z.
TEST(collective_matmul_time, pipelined_3d_product_hides_the_gather_of_a_and_the_reduce_scatter) {
  expect_pipeline(
      serial({cube_tokens, cube_inputs}, 1) * serial({cube_inputs, cube_outputs}, 2),
      [](const auto& a, const auto& b, const auto&, matmul_options o) { return matmul(a, b, o); },
      [](const sim::machine& machine, int bands) {
        return pipeline_step{block_collective(machine, sim::collective::all_gather, k / 2, n / 4),
                             block_collective(machine, sim::collective::all_gather, m / 4 / bands, k / 2),
                             2 * gemm_time(machine, m / 2 / bands, n / 4, k / 2),
                             block_collective(machine, sim::collective::reduce_scatter, m / 4 / bands, n / 2)};
      });
}

// dA = dC·Bᵀ: bands of dC's rows gathered over z, two tiles of the inner dimension added, summed over y.
TEST(collective_matmul_time, pipelined_3d_input_gradient_hides_the_gather_of_dc_and_the_reduce_scatter) {
  expect_pipeline(
      serial({cube_tokens, cube_outputs}, 3) * serial({cube_inputs, cube_outputs}, 2).transpose(),
      [](const auto&, const auto& b, const auto& dc, matmul_options o) { return matmul(dc, transposed(b), o); },
      [](const sim::machine& machine, int bands) {
        return pipeline_step{
            block_collective(machine, sim::collective::all_gather, k / 2, n / 4),
            block_collective(machine, sim::collective::all_gather, m / 4 / bands, n / 2),
            gemm_time(machine, m / 2 / bands, k / 2, n / 4) + gemm_time(machine, m / 2 / bands, k / 2, n / 4, true),
            block_collective(machine, sim::collective::reduce_scatter, m / 4 / bands, k / 2)};
      });
}

// dB = Aᵀ·dC: bands of A's columns gathered over y (each rank's band of columns copied together first),
// dC whole over z, two tiles of columns, summed over x.
TEST(collective_matmul_time, pipelined_3d_weight_gradient_hides_the_gather_of_a_and_the_reduce_scatter) {
  expect_pipeline(
      serial({cube_tokens, cube_inputs}, 1).transpose() * serial({cube_tokens, cube_outputs}, 3),
      [](const auto& a, const auto&, const auto& dc, matmul_options o) { return matmul(transposed(a), dc, o); },
      [](const sim::machine& machine, int bands) {
        return pipeline_step{block_collective(machine, sim::collective::all_gather, m / 4, n / 2),
                             block_collective(machine, sim::collective::all_gather, m / 4, k / 2 / bands),
                             2 * gemm_time(machine, k / 2 / bands, n / 4, m / 2),
                             block_collective(machine, sim::collective::reduce_scatter, k / 2 / bands, n / 4),
                             copy_time(machine, m / 4 * k / 2 / bands)};
      });
}

}  // namespace
