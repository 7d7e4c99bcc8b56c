// bench/reproduce_papers: the papers' measured tables, simulated. The 3-D paper (Bian, Xu,
// Wang, You: "Maximizing Parallelism in Distributed Training for Huge Neural Networks"), its Table 1
// (weak scaling) and Table 2 (strong scaling): Transformer layers in the 1-D (Megatron), 2-D (SUMMA)
// and 3-D (cube) families on 8 to 64 V100s of TACC Longhorn (sim::presets::v100_nodes: nodes of 4,
// NVLink inside, one EDR InfiniBand NIC per node), run shapes-only (sim_gpu::execution::shapes_only).
//   reproduce_papers [--layers N] [--only TEXT]... [--reduce-during-backward MIB]
//                    [--recompute attention|block]  prints a JSON array of rows to stdout, progress
//                                                   to stderr; --only keeps the rows whose label
//                                                   ("Table 2, 3-D, 64 GPUs, ...") contains TEXT;
//                                                   --recompute: the 3-D paper's layers recompute
//                                                   attention's probabilities or all their
//                                                   activations in the backward pass
//                   [--recompute-in 1-D|2-D|3-D]    ... in that family's rows only
//                   [--timeline DIRECTORY]          writes each 3-D paper configuration's timeline
//                                                   there, a Chrome trace per configuration
//                                                   (scripts/trace-summary tells where its time goes)
//                   [--nics-per-node N]             the 3-D paper's nodes with N EDR NICs instead of
//                                                   one (the paper does not say how many Longhorn's
//                                                   nodes have; docs/papers.md shows what 2 does)
//                   [--cube-placement library|colossal-ai]  where the 3-D cube's axes lie: the
//                                                   library's default directions (weights gathered
//                                                   over the axis whose ranks lie furthest apart),
//                                                   or as Colossal-AI's Initializer_3D places them
//                                                   (weights gathered inside a node; docs/papers.md)
//                   [--summa in-turn|ahead]         the 2-D rows' SUMMA broadcasts each step's panels
//                                                   and then multiplies them, as the paper's code did
//                                                   (in-turn, the default), or starts the next step's
//                                                   before the product (the library's default)
// And the weight-update paper (Yuanzhong Xu et al.: "Automatic Cross-Replica Sharding of Weight Update
// in Data-Parallel Training"): its Transformer step on 1024 TPU v3 chips with the replicated and with
// the sharded weight update (Section 6.1), further below; --layers applies to the 3-D rows only, and
// its labels read "Section 6.1, Transformer, 1024 chips, replicated update" and alike. With
// --reduce-during-backward MIB its gradients lie in buckets of MIB MiB whose reductions start as the
// backward pass completes them, the communicator on a stream of its own (docs/sharded-update.md).
// Each row: {paper, table, row, quantity, simulated, published, note?, alternative?, absolute?,
// memory_mib?} (memory_mib: the largest device's memory high-water mark, on a configuration's last
// time row). The
// 3-D paper's times are in seconds; the weight-update paper's in milliseconds, and its rows are
// "absolute" (the simulated step is the whole model's, so no unknown factor stands between the two).
// And the fused computation-collective paper (Punniyamurthy et al.: "GPU-initiated Fine-grained
// Overlap of Collective Communication with Computation"): the embedding bag fused with the
// all-to-all that consumes it, against the two run one after the other, on MI210s: 2 nodes of one GPU
// (its Figure 10) and one node of 4 (its Figure 14), further below; labels read "Figure 10, inter-node,
// 2 nodes x 1 MI210, ..." and alike.
// scripts/reproduce-papers turns the rows into Markdown tables (docs/papers.md).
//
// What the paper leaves unstated, and what is taken instead (the same rule for every row):
// - Layers, and how many steps its times add up: not given. Its layers are identical, so the program
//   simulates one layer (--layers N runs N in a row) and its times are those of one layer's step;
//   the published ones are a common multiple of that (docs/papers.md compares them up to it).
// - Heads: not given. Each row takes the fewest heads of at most 128 columns that the family keeps
//   whole on every rank (1-D: heads divisible by P; 2-D: by q; 3-D: by p).
// - Its step: forward and backward of the layers, without an optimizer step ("the Transformer model
//   itself, i.e. the consecutive Transformer layers", Section 4.1). Its average step time is
//   (forward + backward) / batch (its equation 6). Sequences of 512, an MLP 4 times the width, float.
// - Streams: its implementations run on PyTorch, where each process group's NCCL collectives go on a
//   stream of their own; so do the program's (use_stream before the mesh, whose axes then get a
//   stream each), and a collective it starts overlaps the kernels that follow and the other axes'
//   collectives (a SUMMA step's row and column broadcasts), sharing the links they both cross.
// - SUMMA in turn: Optimus's SUMMA as Colossal-AI first released it (October 2021, after the paper)
//   broadcasts each step's panels, then multiplies them, then reduces (dist.broadcast and dist.reduce
//   without async_op; the next step's broadcasts started before the product came in December 2021),
//   so the 2-D rows run with matmul_options::summa = in_turn. The library's 1-D and 3-D layers, like
//   the paper's, wait for their collectives before the products that read them.
// Shapes the library does not take as they stand (it keeps whole heads and whole samples on a rank, as
// attention needs; Megatron's 1-D needs the same of the width):
// - Table 2, 1-D on 36 GPUs: width 3072 splits into whole heads over 36 ranks for no head count
//   (36 does not divide 3072); simulated at 3096 = 36 heads of 86, the next width that does.
// - Table 2, 3-D on 64 GPUs: batch 24 does not split over the 16 ranks the rows are cut over; batches
//   16 and 32 are simulated and the times interpolated (the step's costs are affine in the batch).
// - Table 1, 1-D: the paper's text gives one row with the GPU counts "8 16"; its batch 60 follows the
//   other 1-D rows' batch = 240 / sqrt(P) at 16 GPUs, which is taken; 8 GPUs is printed as well,
//   marked alternative.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <numeric>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "shardwise/fused/embedding_all_to_all.hpp"
#include "shardwise/mesh/data_parallel_mesh.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/model/gpt.hpp"
#include "shardwise/nn/recomputation.hpp"
#include "shardwise/nn/transformer_block.hpp"
#include "shardwise/optim/adam.hpp"
#include "shardwise/optim/sharded.hpp"
#include "shardwise/sim/presets.hpp"
#include "shardwise/sim/sim_gpu.hpp"

namespace {

using namespace shardwise;

constexpr const char* paper = "3-D tensor parallelism (Bian et al.)";
constexpr std::int64_t sequence = 512;  // "fix the sequence length to 512" (Table 1's caption; Table 2 alike)
constexpr std::int64_t largest_head = 128;

enum class parallelism { one_d, two_d, three_d };

const char* family_name(parallelism f) {
  return f == parallelism::one_d ? "1-D" : f == parallelism::two_d ? "2-D" : "3-D";
}

// One row of a table: the configuration and the published times (seconds).
struct published_row {
  const char* table;
  parallelism family;
  int gpus;
  std::int64_t batch;
  std::int64_t hidden;
  double forward;
  double backward;
  double average_step;
  bool alternative = false;  // another reading of an ambiguous row; left out of comparisons
};

// Table 1 (weak scaling) and Table 2 (strong scaling), row by row as the paper prints them.
const std::vector<published_row> rows = {
    {"Table 1", parallelism::one_d, 16, 60, 2048, 4.759, 15.676, 0.341},       // Table 1, 1-D, first row ("8 16")
    {"Table 1", parallelism::one_d, 8, 60, 2048, 4.759, 15.676, 0.341, true},  // the same row read as 8 GPUs
    {"Table 1", parallelism::one_d, 36, 40, 6120, 13.515, 31.822, 1.133},      // Table 1, 1-D, 36 GPUs
    {"Table 1", parallelism::one_d, 64, 30, 8192, 13.915, 32.890, 1.560},      // Table 1, 1-D, 64 GPUs
    {"Table 1", parallelism::two_d, 16, 192, 4096, 33.860, 101.981, 0.708},    // Table 1, 2-D, 16 GPUs
    {"Table 1", parallelism::two_d, 36, 288, 6120, 54.760, 165.850, 0.766},    // Table 1, 2-D, 36 GPUs
    {"Table 1", parallelism::two_d, 64, 384, 8192, 99.419, 304.707, 1.052},    // Table 1, 2-D, 64 GPUs
    {"Table 1", parallelism::three_d, 8, 192, 2048, 30.096, 81.212, 0.580},    // Table 1, 3-D, 8 GPUs
    {"Table 1", parallelism::three_d, 64, 384, 8192, 79.349, 125.037, 0.672},  // Table 1, 3-D, 64 GPUs
    {"Table 2", parallelism::one_d, 8, 12, 3072, 1.470, 5.699, 0.597},         // Table 2, 1-D, 8 GPUs
    {"Table 2", parallelism::one_d, 16, 12, 3072, 1.371, 5.152, 0.544},        // Table 2, 1-D, 16 GPUs
    {"Table 2", parallelism::one_d, 36, 12, 3072, 1.455, 5.414, 0.572},        // Table 2, 1-D, 36 GPUs
    {"Table 2", parallelism::one_d, 64, 12, 3072, 1.433, 5.167, 0.550},        // Table 2, 1-D, 64 GPUs
    {"Table 2", parallelism::two_d, 16, 24, 3072, 4.680, 13.698, 0.766},       // Table 2, 2-D, 16 GPUs
    {"Table 2", parallelism::two_d, 36, 24, 3072, 3.900, 11.433, 0.639},       // Table 2, 2-D, 36 GPUs
    {"Table 2", parallelism::two_d, 64, 24, 3072, 3.007, 8.920, 0.497},        // Table 2, 2-D, 64 GPUs
    {"Table 2", parallelism::three_d, 8, 24, 3072, 3.249, 9.120, 0.515},       // Table 2, 3-D, 8 GPUs
    {"Table 2", parallelism::three_d, 64, 24, 3072, 2.494, 6.129, 0.359},      // Table 2, 3-D, 64 GPUs
};

int integer_root(int value, int power) {
  const int root = static_cast<int>(std::lround(std::pow(value, 1.0 / power)));
  int check = 1;
  for (int i = 0; i < power; ++i) check *= root;
  if (check != value) throw std::invalid_argument(std::to_string(value) + " GPUs make no square or cube grid");
  return root;
}

// The family's grid on `gpus` ranks, and how many of them cut the rows and the columns of the hidden
// activations (the attention keeps whole samples over the first and whole heads over the second).
struct grid {
  std::vector<int> shape;
  int row_ranks;
  int column_ranks;
};

grid grid_of(parallelism f, int gpus) {
  switch (f) {
    case parallelism::one_d: return {{gpus}, 1, gpus};
    case parallelism::two_d: {
      const int q = integer_root(gpus, 2);
      return {{q, q}, q, q};
    }
    case parallelism::three_d: {
      const int p = integer_root(gpus, 3);
      return {{p, p, p}, p * p, p};
    }
  }
  throw std::logic_error("unknown family");
}

// The fewest heads of at most `largest_head` columns, a multiple of `column_ranks`, that split `hidden`.
std::optional<std::int64_t> heads_for(std::int64_t hidden, int column_ranks) {
  for (std::int64_t heads = column_ranks; heads <= hidden; heads += column_ranks)
    if (hidden % heads == 0 && hidden / heads <= largest_head) return heads;
  return std::nullopt;
}

struct step_times {
  double forward = 0;
  double backward = 0;
  double makespan = 0;
  std::int64_t memory_high_water = 0;
};

// One step of `layers` blocks (forward, then backward) on the family's mesh, shapes only. Forward and
// backward are each timed from a barrier to the next, after every rank's streams have drained, as a
// synchronized wall clock times them on a real machine. With a `trace` path, the run's timeline is
// written there (Chrome trace-event JSON, sim/timeline.hpp).
template <class Family, std::size_t Dimensions>
step_times simulate(const std::vector<int>& shape, const nn::block_options& options, std::int64_t batch, int layers,
                    int nics_per_node, const std::string& trace) {
  coordinates<Dimensions> grid_shape{};
  for (std::size_t a = 0; a < Dimensions; ++a) grid_shape[a] = shape[a];
  int ranks = 1;
  for (const int extent : shape) ranks *= extent;
  step_times times;
  sim::machine machine = sim::presets::v100_nodes(ranks, 4, nics_per_node);
  machine.record_timeline = !trace.empty();
  const auto report = sim_gpu::run(
      ranks, machine,
      [&](sim_gpu::communicator& world) {
        world.use_stream(world.device().create_stream("communication"));  // before the mesh: its axes get their own
        process_mesh mesh(world, grid_shape);
        using mesh_type = decltype(mesh);
        using block_type = nn::transformer_block<float, Family, mesh_type>;
        std::deque<block_type> blocks;  // blocks stay where they are built
        for (int layer = 0; layer < layers; ++layer) blocks.emplace_back(mesh, options, layer + 1);
        const matrix_extents extents{batch * options.sequence, options.hidden};
        dtensor<float, typename Family::input, mesh_type> activation(mesh, extents);
        dtensor<float, typename Family::input, mesh_type> gradient(mesh, extents);

        const double start = world.synchronized_now();
        for (auto& block : blocks) activation = block.forward(activation);
        const double forward_end = world.synchronized_now();
        for (auto block = blocks.rbegin(); block != blocks.rend(); ++block) gradient = block->backward(gradient);
        const double backward_end = world.synchronized_now();
        if (world.rank() == 0) {
          times.forward = forward_end - start;
          times.backward = backward_end - forward_end;
        }
      },
      sim_gpu::execution::shapes_only);
  times.makespan = report.makespan();
  times.memory_high_water = report.largest_memory_high_water();
  if (!trace.empty()) {
    report.timeline->write_chrome_trace(trace);
    std::fprintf(stderr, "timeline: %s\n", trace.c_str());
  }
  return times;
}

// Where a cube's axes lie on the ranks (process_mesh is row-major: the last axis's ranks are adjacent,
// inside a node). library: directions<> (the paper's (y, x, z)), the weights gathered over x, whose
// ranks lie furthest apart. colossal_ai: as Colossal-AI's Initializer_3D groups rank i + p*j + p*p*k,
// the weights gathered over i (adjacent ranks), the activations over j and reduce-scattered over k.
enum class cube_placement { library, colossal_ai };

step_times simulate(parallelism f, const grid& g, const nn::block_options& options, std::int64_t batch, int layers,
                    int nics_per_node, cube_placement placement, const std::string& trace) {
  switch (f) {
    case parallelism::one_d:
      return simulate<nn::tensor_parallel_1d<>, 1>(g.shape, options, batch, layers, nics_per_node, trace);
    case parallelism::two_d:
      return simulate<nn::tensor_parallel_2d<>, 2>(g.shape, options, batch, layers, nics_per_node, trace);
    case parallelism::three_d:
      if (placement == cube_placement::colossal_ai)
        return simulate<nn::tensor_parallel_3d<directions<1, 2, 0>>, 3>(g.shape, options, batch, layers, nics_per_node,
                                                                        trace);
      return simulate<nn::tensor_parallel_3d<>, 3>(g.shape, options, batch, layers, nics_per_node, trace);
  }
  throw std::logic_error("unknown family");
}

std::string json_string(const std::string& text) {
  std::string quoted = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') quoted += '\\';
    quoted += c;
  }
  return quoted + "\"";
}

struct output_row {
  std::string table, row, quantity, note;
  double simulated, published;
  bool alternative;
  const char* paper_name = paper;
  bool absolute = false;  // the published value is the simulated quantity itself, with no unknown factor
  // The configuration's memory high-water mark on its largest device, on the row that closes its
  // configuration (0: none), so that check-modelled-results holds the docs' memory figures too.
  double memory_mib = 0;
};

double mebibytes(std::int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

std::string format_row(const output_row& r) {
  char numbers[96];
  std::snprintf(numbers, sizeof numbers, "\"simulated\": %.6g, \"published\": %.6g", r.simulated, r.published);
  std::string line = "{\"paper\": " + json_string(r.paper_name) + ", \"table\": " + json_string(r.table) +
                     ", \"row\": " + json_string(r.row) + ", \"quantity\": " + json_string(r.quantity) + ", " + numbers;
  if (!r.note.empty()) line += ", \"note\": " + json_string(r.note);
  if (r.alternative) line += ", \"alternative\": true";
  if (r.absolute) line += ", \"absolute\": true";
  if (r.memory_mib > 0) {
    std::snprintf(numbers, sizeof numbers, ", \"memory_mib\": %.6g", r.memory_mib);
    line += numbers;
  }
  return line + "}";
}

// ---- The weight-update paper (Xu et al., "Automatic Cross-Replica Sharding of Weight Update in
// Data-Parallel Training"): its Transformer on 1024 TPU v3 chips, a training step with the weight update
// replicated on every replica and sharded across them (Section 6.1).
//
// What the paper gives, and what is taken where it is silent (docs/papers.md says why):
// - The machine: "Cloud TPUv3 ... 1024 chips in a 2D mesh, where each chip contains two processing
//   cores ... each replica occupies a single core" (Section 6). sim::presets::tpu_v3_pod(32, 32, 2): a
//   device per core, the two cores of a chip sharing its links, each with half its rate and memory
//   bandwidth; a replica is a device.
// - Batch and optimizer: Transformer, 2048 cores, batch 2048, ADAM (Table 1): one sequence a core.
//   Adam without weight decay or clipping (optim::adam), float32 master weights and state.
// - The model: "based on the same configuration as in the MLPerf 0.6 submission" (Section 6), which the
//   paper does not spell out; the MLPerf Transformer is Transformer big (Vaswani et al.): width 1024,
//   16 heads, MLP 4096, 6 encoder and 6 decoder layers, a shared vocabulary of 33708 subwords, and
//   tensor2tensor's transformer_mlperf_tpu takes max_length 256 with packed examples. The library's model::gpt is
//   decoder-only; 14 of its blocks have the same weights (168 · width²) and the same products per token pair as the 6 +
//   6 encoder-decoder layers (an encoder layer 12 · width², a decoder layer 16 · width² with its cross-attention), so
//   the program runs 14 blocks on sequences of 256 with the vocabulary tied to the head, as the original.
// - Partial sharding: at large scale the replicas shard "in 64 ways" within groups and all-reduce across
//   groups (Section 5.2: rows of the device array shard, columns all-reduce); 64 cores are 32 chips, a
//   row of the 32 x 32 torus. Sharding in all 2048 cores is simulated as well, as another reading.
// - Precision: mixed, as tensor2tensor's transformer_mlperf_tpu runs (activation_dtype bfloat16, float32
//   variables): model::gpt<bf16> keeps bf16 weights and activations with float32 gradients, and the
//   update float32 master weights (optim::*_update<adam, bf16>), so the sharded update gathers bf16
//   weights as the paper does (Figure 7). Products are priced at the TPU's bf16 matrix rate.
constexpr const char* weight_update_paper = "Sharded weight update (Xu et al.)";
constexpr const char* weight_update_table = "Section 6.1";
constexpr int pod_rows = 32, pod_cols = 32;          // 1024 chips, the paper's large scale (Section 6)
constexpr int cores_per_chip = 2;                    // Section 6: "each chip contains two processing cores"
constexpr std::int64_t sequences_per_core = 1;       // Table 1: batch 2048 over 2048 cores
constexpr int sharding_group = 64;                   // Section 5.2: groups of 64 replicas (cores) = 32 chips
constexpr double step_replicated_ms = 46.5;          // Section 6.1: "reduces from 46.5ms ..."
constexpr double step_sharded_ms = 25.6;             // Section 6.1: "... to 25.6ms"
constexpr double update_fraction_replicated = 0.40;  // Section 2.2: "more than 40% of the step time in
                                                     // weight update on 1024 TPUv3 chips"
constexpr model::gpt_config transformer_big{
    .vocabulary = 33708, .context = 256, .hidden = 1024, .heads = 16, .layers = 14, .expansion = 4};

enum class update_variant { replicated, sharded_in_groups, sharded_in_all };

const char* variant_name(update_variant v) {
  switch (v) {
    case update_variant::replicated: return "replicated update";
    case update_variant::sharded_in_groups: return "sharded update (groups of 32 chips)";
    case update_variant::sharded_in_all: return "sharded update (all 2048 cores)";
  }
  return "";
}

struct training_step_times {
  double step = 0;    // forward, backward, gradient reduction, update, weight all-gather
  double update = 0;  // from the barrier after the backward to the end of the step
  std::int64_t memory_high_water = 0;
};

// One training step of the Transformer on every device of `machine`, a replica each, data-parallel,
// shapes only, timed from a barrier (every rank's streams drained) to the next, as the 3-D rows are.
// With `buckets_during_backward` elements a bucket, the reductions start during the backward pass.
training_step_times simulate_training_step(update_variant variant, const sim::machine& machine,
                                           std::size_t buckets_during_backward = 0) {
  const int replicas = machine.network.devices();
  const bool during_backward = buckets_during_backward != 0;
  training_step_times times;
  const auto report = sim_gpu::run(
      replicas, machine,
      [&](sim_gpu::communicator& world) {
        if (during_backward) world.use_stream(world.device().create_stream("communication"));
        data_parallel_mesh mesh(world, replicas, coordinates<1>{1});
        using tensor_parallel_mesh = std::remove_cvref_t<decltype(mesh.tensor_parallel())>;
        model::gpt<bf16, nn::tensor_parallel_1d<>, tensor_parallel_mesh> transformer(mesh.tensor_parallel(),
                                                                                     transformer_big);
        // Token ids only steer which vocabulary rows are read; their values cost nothing.
        std::vector<std::int32_t> tokens(static_cast<std::size_t>(sequences_per_core * transformer_big.context));
        for (std::size_t t = 0; t < tokens.size(); ++t)
          tokens[t] = static_cast<std::int32_t>((t * 7919 + static_cast<std::size_t>(mesh.replica())) %
                                                static_cast<std::size_t>(transformer_big.vocabulary));
        constexpr float learning_rate = 1e-3f;
        double start = 0, backward_end = 0, end = 0;
        // Forward and backward (telling `update` on `comm` which gradients are done, when they are
        // reduced during it), then `update_step`, each phase timed from a synchronized clock.
        const auto timed_step = [&](auto& update, auto& comm, auto&& update_step) {
          start = world.synchronized_now();
          (void)transformer.forward(tokens, tokens);
          if (during_backward) {
            transformer.backward(
                1.0f, [&](std::size_t first, std::size_t count) { update.gradients_ready(comm, first, count); });
          } else {
            transformer.backward();
          }
          backward_end = world.synchronized_now();
          update_step();
          end = world.synchronized_now();
        };
        const optim::update_options buckets{buckets_during_backward};
        if (variant == update_variant::replicated) {
          optim::replicated_update<optim::adam, bf16> update(transformer, mesh.data(), {}, buckets);
          timed_step(update, mesh.data(), [&] { update.step(mesh.data(), learning_rate); });
        } else if (variant == update_variant::sharded_in_all) {
          optim::sharded_update<optim::adam, bf16> update(transformer, mesh.data(), {}, buckets);
          timed_step(update, mesh.data(), [&] { update.step(mesh.data(), learning_rate); });
        } else {
          // A row of the torus shards (ranks row-major, torus_2d), its column all-reduces the blocks.
          const int group_size = std::min(sharding_group, replicas);
          auto group = mesh.data().split(mesh.replica() / group_size, mesh.replica());
          auto across = mesh.data().split(mesh.replica() % group_size, mesh.replica());
          optim::sharded_update<optim::adam, bf16> update(transformer, group, {}, buckets);
          timed_step(update, group, [&] { update.step(group, across, learning_rate); });
        }
        if (world.rank() == 0) {
          times.step = end - start;
          times.update = end - backward_end;
        }
      },
      sim_gpu::execution::shapes_only);
  times.memory_high_water = report.largest_memory_high_water();
  return times;
}

// Whether a row labelled `label` is run: --only's texts, when any is given, must include one it contains.
bool wanted(const std::vector<std::string>& only, const std::string& label) {
  return only.empty() ||
         std::ranges::any_of(only, [&](const std::string& text) { return label.find(text) != std::string::npos; });
}

void weight_update_rows(const std::vector<std::string>& only, std::size_t buckets_during_backward,
                        std::vector<output_row>& output) {
  const std::string chips = std::to_string(pod_rows * pod_cols) + " chips";
  std::string model_note =
      "14 decoder blocks of width 1024, 16 heads, MLP 4096, vocabulary 33708, a sequence of 256 "
      "a core, a device a core (2 a chip), Adam; bf16 weights and activations, float32 gradients, master "
      "weights and Adam state";
  if (buckets_during_backward != 0)
    model_note += "; gradients reduced during the backward pass, in buckets of " +
                  std::to_string(buckets_during_backward * sizeof(float) >> 20) + " MiB";
  std::optional<training_step_times> replicated, grouped, everywhere;
  for (const update_variant variant :
       {update_variant::replicated, update_variant::sharded_in_groups, update_variant::sharded_in_all}) {
    const std::string row = "Transformer, " + chips + ", " + variant_name(variant);
    if (!wanted(only, std::string(weight_update_table) + ", " + row)) continue;
    const auto wall_start = std::chrono::steady_clock::now();
    const training_step_times times = simulate_training_step(
        variant, sim::presets::tpu_v3_pod(pod_rows, pod_cols, cores_per_chip), buckets_during_backward);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
    std::fprintf(stderr, "%s %s: step %.3f ms, update phase %.3f ms, memory %.0f MiB per core; %.1f s wall\n",
                 weight_update_table, row.c_str(), times.step * 1e3, times.update * 1e3,
                 mebibytes(times.memory_high_water), wall);
    const bool alternative = variant == update_variant::sharded_in_all;
    const double published = variant == update_variant::replicated ? step_replicated_ms : step_sharded_ms;
    output.push_back({weight_update_table, row, "step time (ms)", model_note, times.step * 1e3, published, alternative,
                      weight_update_paper, true, mebibytes(times.memory_high_water)});
    (variant == update_variant::replicated          ? replicated
     : variant == update_variant::sharded_in_groups ? grouped
                                                    : everywhere) = times;
  }
  if (replicated && grouped)
    output.push_back({weight_update_table, "Transformer, " + chips, "speedup of the sharded update", "",
                      replicated->step / grouped->step, step_replicated_ms / step_sharded_ms, false,
                      weight_update_paper, true});
  // The weight update's share of the replicated step: the optimizer alone, timed on one core (no
  // gradient reduction to do: the update phase is the optimizer's kernels), over the 1024-chip step.
  const std::string fraction_row = "Transformer, " + chips + ", replicated update";
  if (replicated && wanted(only, std::string(weight_update_table) + ", " + fraction_row + ", fraction")) {
    const auto one_core = sim::presets::tpu_v3_pod(1, 1, cores_per_chip);
    const training_step_times alone = simulate_training_step(
        update_variant::replicated, {one_core.device, sim::topology::fully_connected(1, one_core.network.peer_link())});
    std::fprintf(stderr, "%s optimizer alone on one core: %.3f ms\n", weight_update_table, alone.update * 1e3);
    output.push_back({weight_update_table, fraction_row, "weight update's fraction of the step",
                      "optimizer time on one core (no gradient all-reduce) / the 1024-chip step; published: "
                      "\"more than 40%\" (Section 2.2)",
                      alone.update / replicated->step, update_fraction_replicated, false, weight_update_paper, true});
  }
}

// ---- The fused computation-collective paper (Punniyamurthy et al., "GPU-initiated Fine-grained
// Overlap of Collective Communication with Computation"): one GPU kernel pools the embedding
// bags and sends each slice of the output to the GPU that consumes it as soon as it is pooled,
// against the baseline's embedding kernels followed by RCCL's all-to-all. Its published reductions
// of the embedding + all-to-all time, fused against unfused:
// - inter-node, "31% reduction in execution time on average (and up to 58%)" (Section 4.2, Figure
//   10), measured on real hardware: "2 (each with x1 GPU)" MI210 nodes on "Infiniband, 20 GB/s"
//   (Table 1), slices of 32 embeddings (Section 4.2);
// - intra-node, "on average 25% (and up to 35%) lower execution time" (Section 4.3, Figure 14), on "4
//   (fully connected)" MI210s on "xGMI links, 80GB/s" (Table 1), zero-copy stores to the peers.
// The paper's 128-node runs (Section 4.4, Figure 15, simulated by its authors with ASTRA-Sim) are of
// a whole DLRM training pass ("~10%"), not of these figures; they are not simulated here.
//
// What the paper gives, and what is taken where it is silent (docs/papers.md says why), the same for
// every configuration:
// - The grid: it "varied the global batch-size and the number of embedding tables processed per GPU"
//   (Section 4.1) without listing them in its text; the project's model study of this paper
//   (bench/fused_embedding.cpp, model/grid, docs/fused.md) takes global batches 256 to 4096 and 16, 64
//   and 256 tables per GPU, which is taken for both figures; embedding dimension 256 (Section 4.1).
// - Bags: "we used the data generator in DLRM" (Section 4.1), whose default is 10 lookups a bag.
// - Slices of 32 rows (Section 4.2) in both figures, the communication-aware order (Section 3.2);
//   inside a node a kernel per table (Section 4.3), each table's slices together (table by table),
//   with the library's one persistent kernel beside it as another reading.
// - Every table of a rank reads one shared block of rows: which rows are read costs nothing in the
//   model, and shapes-only runs do not pool (nor hold the outputs).
constexpr const char* fused_paper = "Fused embedding + all-to-all (Punniyamurthy et al.)";
constexpr std::int64_t fused_dimension = 256;    // Section 4.1: "embedding dimension=256"
constexpr std::int64_t fused_slice_rows = 32;    // Section 4.2: "a slice size of 32 embeddings"
constexpr std::int64_t fused_bag_length = 10;    // DLRM's data generator default (Section 4.1)
constexpr std::int64_t fused_table_rows = 2048;  // not given; bench/fused_embedding.cpp's sweep

struct fused_figure {
  const char* table;
  const char* setting;
  int gpus, gpus_per_node;
  double mean_reduction, largest_reduction;
};

const std::vector<fused_figure> fused_figures = {
    {"Figure 10", "inter-node, 2 nodes x 1 MI210", 2, 1, 0.31, 0.58},  // Section 4.2: 31% mean, up to 58%
    {"Figure 14", "intra-node, 1 node x 4 MI210", 4, 4, 0.25, 0.35},   // Section 4.3: 25% mean, up to 35%
};

struct fused_times {
  double fused = 0, per_table = 0, baseline = 0;
};

// One call of the fused path (one persistent kernel), one of the baseline and, inside a node, one of
// the fused path with a kernel per table (the paper's intra-node kernel, Section 4.3), on `gpus`
// MI210s, shapes only, each timed from a barrier (every rank's streams drained) to the next.
fused_times simulate_fused(const fused_figure& figure, std::int64_t batch, int tables_per_gpu) {
  fused_times times;
  (void)sim_gpu::run(
      figure.gpus, sim::presets::mi210_nodes(figure.gpus, figure.gpus_per_node),
      [&](sim_gpu::communicator& world) {
        const fused::embedding_shape shape{figure.gpus * tables_per_gpu, fused_dimension, batch};
        const auto options = [](bool kernel_per_table) {
          fused::embedding_options o;
          o.slice_rows = fused_slice_rows;
          o.order = kernel_per_table ? fused::slice_order::table_by_table : fused::slice_order::communication_aware;
          o.gpu_initiated.kernel_per_table = kernel_per_table;
          return o;
        };
        const std::vector<float> rows(static_cast<std::size_t>(fused_table_rows * fused_dimension), 0.5f);
        std::vector<std::int64_t> offsets, indices;
        for (std::int64_t b = 0; b <= batch; ++b) offsets.push_back(b * fused_bag_length);
        for (std::int64_t i = 0; i < batch * fused_bag_length; ++i)
          indices.push_back((i * 7919 + world.rank()) % fused_table_rows);
        // Table-wise over the GPUs, every GPU holds tables_per_gpu of them.
        const auto mine = static_cast<std::size_t>(tables_per_gpu);
        const std::vector<std::span<const float>> tables(mine, std::span<const float>(rows));
        const std::vector<fused::embedding_bags> bags(mine, fused::embedding_bags{offsets, indices});
        {
          fused::embedding_all_to_all op(world, shape, options(false));
          const double start = world.synchronized_now();
          (void)op.fused(tables, bags);
          const double fused_end = world.synchronized_now();
          (void)op.baseline(tables, bags);
          const double baseline_end = world.synchronized_now();
          if (world.rank() == 0) {
            times.fused = fused_end - start;
            times.baseline = baseline_end - fused_end;
          }
        }
        if (figure.gpus_per_node == 1) return;
        // One operator at a time: each holds its outputs and buffers for real.
        fused::embedding_all_to_all op(world, shape, options(true));
        const double start = world.synchronized_now();
        (void)op.fused(tables, bags);
        const double end = world.synchronized_now();
        if (world.rank() == 0) times.per_table = end - start;
      },
      sim_gpu::execution::shapes_only);
  return times;
}

void fused_rows(const std::vector<std::string>& only, std::vector<output_row>& output) {
  for (const auto& figure : fused_figures) {
    std::vector<double> reductions, per_table_reductions;
    for (const std::int64_t batch : {256, 512, 1024, 2048, 4096})
      for (const int tables : {16, 64, 256}) {
        const std::string configuration = std::to_string(batch) + "|" + std::to_string(tables);
        const std::string label = std::string(figure.table) + ", " + figure.setting + ", " + configuration;
        if (!wanted(only, label)) continue;
        const auto wall_start = std::chrono::steady_clock::now();
        const fused_times times = simulate_fused(figure, batch, tables);
        const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
        const double normalised = times.fused / times.baseline;
        std::fprintf(stderr, "%s %s %s: fused %.4f ms, baseline %.4f ms, fused / baseline %.3f", figure.table,
                     figure.setting, configuration.c_str(), times.fused * 1e3, times.baseline * 1e3, normalised);
        if (figure.gpus_per_node > 1) {
          std::fprintf(stderr, "; a kernel per table %.4f ms, / baseline %.3f", times.per_table * 1e3,
                       times.per_table / times.baseline);
          per_table_reductions.push_back(1 - times.per_table / times.baseline);
        }
        std::fprintf(stderr, "; %.1f s wall\n", wall);
        reductions.push_back(1 - normalised);
        // Where the baseline's time goes, from the operator's own cost model (fused::predict): its
        // pooling kernels (one a table), the unpack of the received blocks, and the all-to-all. A
        // fused kernel per table keeps the pooling kernels and at best hides the rest: 1 - pooling /
        // baseline bounds its reduction.
        const auto machine = sim::presets::mi210_nodes(figure.gpus, figure.gpus_per_node);
        const fused::embedding_shape shape{figure.gpus * tables, fused_dimension, batch};
        const fused::embedding_plan plan(shape, figure.gpus, fused_slice_rows, fused::slice_order::communication_aware);
        const auto predicted = fused::predict(plan, machine, sim::gpu_initiated_model{}, fused_bag_length);
        double unpack = 0;
        for (int r = 0; r < figure.gpus; ++r)
          unpack = std::max(unpack, machine.device.duration(fused::unpack_work(plan, r)));
        const double pooling = predicted.compute - unpack;
        std::fprintf(stderr,
                     "  predicted baseline %.4f ms: pooling kernels %.4f, unpack %.4f, all-to-all %.4f; "
                     "per-table kernel bound %.3f\n",
                     predicted.baseline * 1e3, pooling * 1e3, unpack * 1e3, predicted.communication * 1e3,
                     1 - pooling / predicted.baseline);
      }
    if (reductions.empty()) continue;
    const std::string note = std::to_string(reductions.size()) +
                             " configurations: global batch 256-4096 x 16, 64, 256 tables per GPU, dimension 256, "
                             "bags of 10, slices of 32";
    const auto mean = [](const std::vector<double>& values) {
      return std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
    };
    const auto largest = [](const std::vector<double>& values) {
      return *std::max_element(values.begin(), values.end());
    };
    // Inside a node the paper launched its fused kernel per table (Section 4.3): those runs are the
    // figure's rows, and the library's one persistent kernel another reading. Between nodes its kernel
    // is persistent, as the library's.
    const bool per_table = figure.gpus_per_node > 1;
    const auto& paper_kernel = per_table ? per_table_reductions : reductions;
    const std::string paper_note = note + (per_table ? ", a kernel per table" : ", one persistent kernel");
    output.push_back({figure.table, figure.setting, "mean reduction of embedding + all-to-all time", paper_note,
                      mean(paper_kernel), figure.mean_reduction, false, fused_paper, true});
    output.push_back({figure.table, figure.setting, "largest reduction of embedding + all-to-all time", paper_note,
                      largest(paper_kernel), figure.largest_reduction, false, fused_paper, true});
    if (per_table) {
      const std::string row = std::string(figure.setting) + ", one persistent kernel";
      const std::string persistent_note = note + ", one persistent kernel (the library's default)";
      output.push_back({figure.table, row, "mean reduction of embedding + all-to-all time", persistent_note,
                        mean(reductions), figure.mean_reduction, true, fused_paper, true});
      output.push_back({figure.table, row, "largest reduction of embedding + all-to-all time", persistent_note,
                        largest(reductions), figure.largest_reduction, true, fused_paper, true});
    }
  }
}

struct simulated_row {
  const published_row* source;
  step_times times;
};

struct arguments {
  int layers = 1;
  std::vector<std::string> only;                          // row labels must contain one of these, when any is given
  std::size_t buckets_during_backward = 0;                // elements a bucket, for the weight-update rows; 0: off
  nn::recomputation recompute = nn::recomputation::none;  // in the 3-D paper's layers
  std::optional<parallelism> recompute_in;                // the one family that recomputes, if not all
  std::string timelines;                                  // a directory for the 3-D paper's timelines; empty: none
  int nics_per_node = 1;                                  // of the 3-D paper's V100 nodes
  cube_placement placement = cube_placement::library;     // of the 3-D paper's cubes
  summa_broadcasts summa = summa_broadcasts::in_turn;     // of the 3-D paper's 2-D rows
};

// Whether option `name`'s value is `first`; a value neither `first` nor `second` ends the program.
bool is_first_of(const char* name, const std::string& value, const char* first, const char* second) {
  if (value != first && value != second) {
    std::fprintf(stderr, "%s takes %s or %s, not '%s'\n", name, first, second, value.c_str());
    std::exit(2);
  }
  return value == first;
}

arguments parse(int argc, char** argv) {
  arguments parsed;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--layers") == 0 && i + 1 < argc) {
      parsed.layers = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      parsed.only.emplace_back(argv[++i]);
    } else if (std::strcmp(argv[i], "--reduce-during-backward") == 0 && i + 1 < argc) {
      const double bucket_mib = std::atof(argv[++i]);
      if (!(bucket_mib > 0)) {
        std::fprintf(stderr, "--reduce-during-backward needs a bucket size in MiB, above 0\n");
        std::exit(2);
      }
      parsed.buckets_during_backward = static_cast<std::size_t>(bucket_mib * (1 << 20) / sizeof(float));
    } else if (std::strcmp(argv[i], "--recompute") == 0 && i + 1 < argc) {
      const auto what = nn::recomputation_named(argv[++i]);
      if (!what) {
        std::fprintf(stderr, "--recompute takes none, attention or block, not '%s'\n", argv[i]);
        std::exit(2);
      }
      parsed.recompute = *what;
    } else if (std::strcmp(argv[i], "--recompute-in") == 0 && i + 1 < argc) {
      const std::string family = argv[++i];
      for (const parallelism f : {parallelism::one_d, parallelism::two_d, parallelism::three_d})
        if (family == family_name(f)) parsed.recompute_in = f;
      if (!parsed.recompute_in) {
        std::fprintf(stderr, "--recompute-in takes 1-D, 2-D or 3-D, not '%s'\n", family.c_str());
        std::exit(2);
      }
    } else if (std::strcmp(argv[i], "--timeline") == 0 && i + 1 < argc) {
      parsed.timelines = argv[++i];
    } else if (std::strcmp(argv[i], "--nics-per-node") == 0 && i + 1 < argc) {
      parsed.nics_per_node = std::atoi(argv[++i]);
      if (parsed.nics_per_node < 1) {
        std::fprintf(stderr, "--nics-per-node needs a positive count\n");
        std::exit(2);
      }
    } else if (std::strcmp(argv[i], "--cube-placement") == 0 && i + 1 < argc) {
      parsed.placement = is_first_of("--cube-placement", argv[++i], "library", "colossal-ai")
                             ? cube_placement::library
                             : cube_placement::colossal_ai;
    } else if (std::strcmp(argv[i], "--summa") == 0 && i + 1 < argc) {
      parsed.summa =
          is_first_of("--summa", argv[++i], "in-turn", "ahead") ? summa_broadcasts::in_turn : summa_broadcasts::ahead;
    } else {
      std::fprintf(stderr, "reproduce_papers: '%s' is not an option, or is an option without its value\n", argv[i]);
      std::fprintf(stderr,
                   "usage: %s [--layers N] [--only TEXT]... [--reduce-during-backward MIB] "
                   "[--recompute none|attention|block] [--recompute-in 1-D|2-D|3-D] [--timeline DIRECTORY] "
                   "[--nics-per-node N] "
                   "[--cube-placement library|colossal-ai] [--summa in-turn|ahead]\n",
                   argv[0]);
      std::exit(2);
    }
  }
  if (parsed.layers < 1) {
    std::fprintf(stderr, "--layers needs a positive count\n");
    std::exit(2);
  }
  return parsed;
}

// Where the timeline of a 3-D paper configuration goes: "<directory>/table-1-3-d-8-gpus-batch-192-hidden-
// 2048.json", at the batch simulated (two of them where a row's batch is interpolated); empty when
// timelines are not asked for.
std::string timeline_path(const std::string& directory, const published_row& source, std::int64_t batch) {
  if (directory.empty()) return {};
  std::string name = std::string(source.table) + " " + family_name(source.family) + " " + std::to_string(source.gpus) +
                     " gpus batch " + std::to_string(batch) + " hidden " + std::to_string(source.hidden);
  for (char& c : name) c = std::isalnum(static_cast<unsigned char>(c)) ? static_cast<char>(std::tolower(c)) : '-';
  std::filesystem::create_directories(directory);
  return directory + "/" + name + ".json";
}

}  // namespace

int main(int argc, char** argv) {
  const arguments given = parse(argc, argv);
  std::vector<output_row> output;
  std::vector<simulated_row> simulated;
  for (const auto& source : rows) {
    const std::string row = std::string(family_name(source.family)) + ", " + std::to_string(source.gpus) +
                            " GPUs, batch " + std::to_string(source.batch) + ", hidden " +
                            std::to_string(source.hidden);
    const std::string label = std::string(source.table) + ", " + row;
    if (!wanted(given.only, label)) continue;
    const auto wall_start = std::chrono::steady_clock::now();
    const grid g = grid_of(source.family, source.gpus);
    std::string note;
    // The width: the paper's, or the next one that splits into whole heads over the column ranks.
    std::int64_t hidden = source.hidden;
    while (!heads_for(hidden, g.column_ranks)) ++hidden;
    const std::int64_t heads = *heads_for(hidden, g.column_ranks);
    if (hidden != source.hidden)
      note = "width " + std::to_string(hidden) + " (" + std::to_string(source.hidden) +
             " splits into whole heads over " + std::to_string(g.column_ranks) + " ranks for no head count); ";
    note += std::to_string(heads) + " heads of " + std::to_string(hidden / heads);
    const nn::block_options options{.hidden = hidden,
                                    .heads = heads,
                                    .sequence = sequence,
                                    .expansion = 4,
                                    .causal = true,
                                    .recompute = !given.recompute_in || *given.recompute_in == source.family
                                                     ? given.recompute
                                                     : nn::recomputation::none,
                                    .products = {.summa = given.summa}};

    step_times times;
    if (source.batch % g.row_ranks == 0) {
      times = simulate(source.family, g, options, source.batch, given.layers, given.nics_per_node, given.placement,
                       timeline_path(given.timelines, source, source.batch));
    } else {
      // Whole samples per rank: interpolate between the nearest batches that split.
      const std::int64_t lower = source.batch / g.row_ranks * g.row_ranks;
      const std::int64_t upper = lower + g.row_ranks;
      const step_times low = simulate(source.family, g, options, lower, given.layers, given.nics_per_node,
                                      given.placement, timeline_path(given.timelines, source, lower));
      const step_times high = simulate(source.family, g, options, upper, given.layers, given.nics_per_node,
                                       given.placement, timeline_path(given.timelines, source, upper));
      const double t = static_cast<double>(source.batch - lower) / static_cast<double>(upper - lower);
      times.forward = low.forward + t * (high.forward - low.forward);
      times.backward = low.backward + t * (high.backward - low.backward);
      times.makespan = low.makespan + t * (high.makespan - low.makespan);
      times.memory_high_water = high.memory_high_water;
      note += "; batch " + std::to_string(source.batch) + " interpolated between " + std::to_string(lower) + " and " +
              std::to_string(upper) + " (whole samples over " + std::to_string(g.row_ranks) + " ranks)";
    }
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
    std::fprintf(stderr,
                 "%s %s %2d GPUs batch %3lld hidden %lld: forward %.4f s, backward %.4f s, makespan %.4f s, "
                 "memory %.0f MiB per GPU; %.1f s wall\n",
                 source.table, family_name(source.family), source.gpus, static_cast<long long>(source.batch),
                 static_cast<long long>(hidden), times.forward, times.backward, times.makespan,
                 mebibytes(times.memory_high_water), wall);

    const auto batch = static_cast<double>(source.batch);
    output.push_back({source.table, row, "forward time (s)", note, times.forward, source.forward, source.alternative});
    output.push_back(
        {source.table, row, "backward time (s)", note, times.backward, source.backward, source.alternative});
    output.push_back({source.table, row, "average step time (s)", note, (times.forward + times.backward) / batch,
                      source.average_step, source.alternative, paper, false, mebibytes(times.memory_high_water)});
    simulated.push_back({&source, times});
  }

  // The speedups of 3-D at 64 GPUs: the ratios of average step times, as the paper's text computes its
  // 2.32x and 1.57x (from Table 1's 64-GPU rows); Table 2's 64-GPU rows give 1.53x and 1.38x.
  const auto average_step = [&](const char* table, parallelism f, int gpus) {
    for (const auto& s : simulated)
      if (std::strcmp(s.source->table, table) == 0 && s.source->family == f && s.source->gpus == gpus &&
          !s.source->alternative)
        return std::optional{std::pair{(s.times.forward + s.times.backward) / static_cast<double>(s.source->batch),
                                       s.source->average_step}};
    return std::optional<std::pair<double, double>>{};  // not simulated in this run (--only)
  };
  for (const char* table : {"Table 1", "Table 2"}) {
    const auto three_d = average_step(table, parallelism::three_d, 64);
    for (const parallelism other : {parallelism::one_d, parallelism::two_d}) {
      const auto baseline = average_step(table, other, 64);
      if (!three_d || !baseline) continue;
      output.push_back({table, "64 GPUs", std::string("speedup of 3-D over ") + family_name(other), "",
                        baseline->first / three_d->first, baseline->second / three_d->second, false});
    }
  }

  weight_update_rows(given.only, given.buckets_during_backward, output);
  fused_rows(given.only, output);
  // A misspelt --only would otherwise print an empty table and succeed.
  if (output.empty() && !given.only.empty()) {
    std::string texts;
    for (const auto& text : given.only) texts += (texts.empty() ? "'" : ", '") + text + "'";
    std::fprintf(stderr,
                 "reproduce_papers: no row's label contains %s (--only); labels read as \"Table 2, 3-D, 64 GPUs, "
                 "batch 384, hidden 8192\", \"Section 6.1, Transformer, 1024 chips, sharded update\", \"Figure 10, "
                 "inter-node, ...\"\n",
                 texts.c_str());
    return 2;
  }

  std::printf("[\n");
  for (std::size_t i = 0; i < output.size(); ++i)
    std::printf("  %s%s\n", format_row(output[i]).c_str(), i + 1 < output.size() ? "," : "");
  std::printf("]\n");
  return 0;
}
