// bench/reproduce_papers: the papers' measured tables, simulated. For now the 3-D paper (Bian, Xu,
// Wang, You: "Maximizing Parallelism in Distributed Training for Huge Neural Networks"), its Table 1
// (weak scaling) and Table 2 (strong scaling): Transformer layers in the 1-D (Megatron), 2-D (SUMMA)
// and 3-D (cube) families on 8 to 64 V100s of TACC Longhorn (sim::presets::v100_nodes: nodes of 4,
// NVLink inside, one EDR InfiniBand NIC per node), run shapes-only (sim_gpu::execution::shapes_only).
//   reproduce_papers [--layers N] [--only TEXT]...   prints a JSON array of rows to stdout, progress
//                                                   to stderr; --only keeps the rows whose label
//                                                   ("Table 2, 3-D, 64 GPUs, ...") contains TEXT
// Each row: {paper, table, row, quantity, simulated, published, note?, alternative?}. Times are in
// seconds. scripts/reproduce-papers turns the rows into Markdown tables (docs/papers.md).
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
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/nn/transformer_block.hpp"
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
  std::int64_t storage_high_water = 0;
};

// One step of `layers` blocks (forward, then backward) on the family's mesh, shapes only. Forward and
// backward are each timed from a barrier to the next, after every rank's streams have drained, as a
// synchronized wall clock times them on a real machine.
template <class Family, std::size_t Dimensions>
step_times simulate(const std::vector<int>& shape, const nn::block_options& options, std::int64_t batch, int layers) {
  coordinates<Dimensions> grid_shape{};
  for (std::size_t a = 0; a < Dimensions; ++a) grid_shape[a] = shape[a];
  int ranks = 1;
  for (const int extent : shape) ranks *= extent;
  step_times times;
  const auto report = sim_gpu::run(
      ranks, sim::presets::v100_nodes(ranks),
      [&](sim_gpu::communicator& world) {
        process_mesh mesh(world, grid_shape);
        using mesh_type = decltype(mesh);
        using block_type = nn::transformer_block<float, Family, mesh_type>;
        std::deque<block_type> blocks;  // blocks stay where they are built
        for (int layer = 0; layer < layers; ++layer) blocks.emplace_back(mesh, options, layer + 1);
        const matrix_extents extents{batch * options.sequence, options.hidden};
        dtensor<float, typename Family::input, mesh_type> activation(mesh, extents);
        dtensor<float, typename Family::input, mesh_type> gradient(mesh, extents);

        const auto synchronized_now = [&] {
          world.device().synchronize();
          world.barrier();
          return world.now();
        };
        const double start = synchronized_now();
        for (auto& block : blocks) activation = block.forward(activation);
        const double forward_end = synchronized_now();
        for (auto block = blocks.rbegin(); block != blocks.rend(); ++block) gradient = block->backward(gradient);
        const double backward_end = synchronized_now();
        if (world.rank() == 0) {
          times.forward = forward_end - start;
          times.backward = backward_end - forward_end;
        }
      },
      sim_gpu::execution::shapes_only);
  times.makespan = report.makespan();
  times.storage_high_water = *std::max_element(report.memory_high_water.begin(), report.memory_high_water.end());
  return times;
}

step_times simulate(parallelism f, const grid& g, const nn::block_options& options, std::int64_t batch, int layers) {
  switch (f) {
    case parallelism::one_d: return simulate<nn::tensor_parallel_1d<>, 1>(g.shape, options, batch, layers);
    case parallelism::two_d: return simulate<nn::tensor_parallel_2d<>, 2>(g.shape, options, batch, layers);
    case parallelism::three_d: return simulate<nn::tensor_parallel_3d<>, 3>(g.shape, options, batch, layers);
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
};

std::string format_row(const output_row& r) {
  char numbers[96];
  std::snprintf(numbers, sizeof numbers, "\"simulated\": %.6g, \"published\": %.6g", r.simulated, r.published);
  std::string line = "{\"paper\": " + json_string(paper) + ", \"table\": " + json_string(r.table) +
                     ", \"row\": " + json_string(r.row) + ", \"quantity\": " + json_string(r.quantity) + ", " + numbers;
  if (!r.note.empty()) line += ", \"note\": " + json_string(r.note);
  if (r.alternative) line += ", \"alternative\": true";
  return line + "}";
}

struct simulated_row {
  const published_row* source;
  step_times times;
};

struct arguments {
  int layers = 1;
  std::vector<std::string> only;  // row labels must contain one of these, when any is given
};

arguments parse(int argc, char** argv) {
  arguments parsed;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--layers") == 0 && i + 1 < argc) {
      parsed.layers = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      parsed.only.emplace_back(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--layers N] [--only TEXT]...\n", argv[0]);
      std::exit(2);
    }
  }
  if (parsed.layers < 1) {
    std::fprintf(stderr, "--layers needs a positive count\n");
    std::exit(2);
  }
  return parsed;
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
    if (!given.only.empty() && std::ranges::none_of(given.only, [&](const std::string& text) {
          return label.find(text) != std::string::npos;
        }))
      continue;
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
    const nn::block_options options{
        .hidden = hidden, .heads = heads, .sequence = sequence, .expansion = 4, .causal = true};

    step_times times;
    if (source.batch % g.row_ranks == 0) {
      times = simulate(source.family, g, options, source.batch, given.layers);
    } else {
      // Whole samples per rank: interpolate between the nearest batches that split.
      const std::int64_t lower = source.batch / g.row_ranks * g.row_ranks;
      const std::int64_t upper = lower + g.row_ranks;
      const step_times low = simulate(source.family, g, options, lower, given.layers);
      const step_times high = simulate(source.family, g, options, upper, given.layers);
      const double t = static_cast<double>(source.batch - lower) / static_cast<double>(upper - lower);
      times.forward = low.forward + t * (high.forward - low.forward);
      times.backward = low.backward + t * (high.backward - low.backward);
      times.makespan = low.makespan + t * (high.makespan - low.makespan);
      times.storage_high_water = high.storage_high_water;
      note += "; batch " + std::to_string(source.batch) + " interpolated between " + std::to_string(lower) + " and " +
              std::to_string(upper) + " (whole samples over " + std::to_string(g.row_ranks) + " ranks)";
    }
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
    std::fprintf(stderr,
                 "%s %s %2d GPUs batch %3lld hidden %lld: forward %.4f s, backward %.4f s, makespan %.4f s, "
                 "storage %.0f MiB per GPU; %.1f s wall\n",
                 source.table, family_name(source.family), source.gpus, static_cast<long long>(source.batch),
                 static_cast<long long>(hidden), times.forward, times.backward, times.makespan,
                 static_cast<double>(times.storage_high_water) / (1 << 20), wall);

    const auto batch = static_cast<double>(source.batch);
    output.push_back({source.table, row, "forward time (s)", note, times.forward, source.forward, source.alternative});
    output.push_back(
        {source.table, row, "backward time (s)", note, times.backward, source.backward, source.alternative});
    output.push_back({source.table, row, "average step time (s)", note, (times.forward + times.backward) / batch,
                      source.average_step, source.alternative});
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

  std::printf("[\n");
  for (std::size_t i = 0; i < output.size(); ++i)
    std::printf("  %s%s\n", format_row(output[i]).c_str(), i + 1 < output.size() ? "," : "");
  std::printf("]\n");
  return 0;
}
