// The fused embedding-bag + all-to-all beside its baseline (Punniyamurthy et al.'s study).
//
// model/…   the MI210 + InfiniBand machine of the paper (sim/presets.hpp: 2 nodes of 1 GPU), from
//           fused/embedding_cost.hpp's predict() — the rules the sim_gpu backend runs with real data
//           (tested equal), without data, so the paper's shapes (embedding dimension 256, up to 4096 ×
//           256 bags per GPU) take milliseconds. The reported time is the fused kernel's modelled
//           time; counters: baseline, compute and communication parts (µs), fused / baseline, the
//           overlap efficiency E, what the automatic path takes (fused / baseline, with the pooling
//           the user declares and with the conservative default), each node's fused time, and the
//           same figures with the slice size the model chooses (automatic_slice_rows).
//     grid/B/T            global batch B × tables per GPU T, slices of 32, bags of 10 (DLRM's
//                         generator default) — and grid_pooling70/ with bags of 70 (the paper's Table 2)
//     slices/S            B = 1024, T = 256, slice size S
//     order/B/T/aware|oblivious  per-node times of the two slice orders (the skew between nodes)
//     small/B/T/S         tiny batches and slices, where the automatic path must not lose
//     scale/GxK/B/T       beyond the paper: G GPUs in nodes of K (8 in 8 nodes, 8 in 2 nodes of 4)
// threads/… wall time at 8 ranks as threads, fused (zero copy, epoch flags) vs baseline
//           (pool, all_to_all_v, unpack) vs what operator() chooses after its trial calls (automatic),
//           slowest rank:
//     fused|baseline|automatic|paired|automatic_paired/8    a batch of 2048 bags over 32 tables of 20000 × 64 floats,
//                         bags of 10
//     fused|baseline|automatic|paired|automatic_paired/sweep/B/T/L  the model's dimension 256, global batch B, T tables
//                         per rank of 2048 rows, bags of L
//     …/criteo_kaggle/B   Criteo Kaggle's 26 tables as DLRM trains on them (3 to 10 million rows,
//                         dimension 16), one lookup a table per sample drawn as data::dlrm_generator
//                         draws them (Zipf), global batch B: uneven tables, narrow rows
//     paired/…            both paths on one operator, a call of each per iteration, each timed on its
//                         own: on a machine whose speed drifts during a run (here one path's time of a
//                         repetition ranges over 30-40% in a run), the two calls of a pair see the same
//                         state. Counters: fused_ms and baseline_ms (each path's median call) and
//                         fused_over_baseline (the median of the pairs' ratios)
//     automatic_paired/…  the same pairs with operator() (after its trial calls) in place of fused():
//                         whether the automatic choice is ever slower than the baseline. Counters:
//                         automatic_ms, baseline_ms, automatic_over_baseline, fuses (1: it fused)
//     pooling_paired/…    the same pairs with the pooling alone in place of fused(): the baseline's
//                         own first phase (embedding_all_to_all::pooling_alone(), each rank's bags
//                         pooled into its send buffer), and nothing moves: what a path would take that
//                         pooled as the baseline does and hid all of its exchange. Not a floor at calls of
//                         about a millisecond, where the baseline of its pairs finds the send buffer
//                         still in the cache (docs/fused.md).
//                         On the original configuration, the grid's shapes of batch 256 with bags of 10,
//                         1024 x 64, its largest shapes and Criteo's (floor_shapes).
//                         Counters: pooling_ms, baseline_ms, pooling_over_baseline
// mpi/…     the same on 8 MPI processes for some of those shapes, when built with MPI and run under
//           mpiexec -n 8 (scripts/bench-fused-embedding does): fused stores into the peers' outputs in
//           an MPI-3 shared-memory window; fused_messages sends its slices as non-blocking messages, as
//           between nodes; fused_two_nodes groups the processes as two nodes of 4 (ranks_per_node:
//           stores within a group, messages between)
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "benchmark_main.hpp"
#include "shardwise/comm/threads.hpp"
#include "shardwise/core/shared_buffer.hpp"
#include "shardwise/data/dlrm_generator.hpp"
#include "shardwise/fused/embedding_all_to_all.hpp"
#include "shardwise/fused/embedding_cost.hpp"
#include "shardwise/sim/presets.hpp"
#include "slowest_rank.hpp"

namespace {

using namespace shardwise;

constexpr int embedding_dimension = 256;  // the paper's (DLRM's Criteo configuration)

// The paper's machine unless told otherwise: `gpus` MI210s in nodes of `gpus_per_node`.
struct modelled_machine {
  int gpus = 2;
  int gpus_per_node = 1;
};

void report_model(benchmark::State& state, std::int64_t batch, int tables_per_gpu, std::int64_t slice_rows,
                  std::int64_t bag_length, fused::slice_order order = fused::slice_order::communication_aware,
                  modelled_machine nodes = {}) {
  const int gpus = nodes.gpus;
  const auto machine = sim::presets::mi210_nodes(gpus, nodes.gpus_per_node);
  const sim::gpu_initiated_model model{};
  const fused::embedding_shape shape{gpus * tables_per_gpu, embedding_dimension, batch};
  const fused::embedding_plan plan(shape, gpus, slice_rows, order);
  fused::embedding_times t;
  for (auto _ : state) {
    t = fused::predict(plan, machine, model, bag_length);
    state.SetIterationTime(t.fused);
  }
  // What operator() does: fused when the model predicts no loss, for the bags it is told to expect.
  auto automatic = [&](std::int64_t expected) {
    const auto guess = fused::predict(plan, machine, model, expected);
    return (guess.fused <= guess.baseline ? t.fused : t.baseline) / t.baseline;
  };
  state.counters["baseline_us"] = t.baseline * 1e6;
  state.counters["compute_us"] = t.compute * 1e6;
  state.counters["communication_us"] = t.communication * 1e6;
  state.counters["fused_us"] = t.fused * 1e6;
  state.counters["normalised"] = t.fused / t.baseline;
  state.counters["overlap_efficiency"] = t.overlap_efficiency();
  state.counters["automatic_normalised"] = automatic(bag_length);
  state.counters["automatic_default_normalised"] = automatic(fused::embedding_options{}.expected_bag_length);
  // With the slice size the operator chooses when told automatic_slice_rows (and the true bag length).
  const auto [best, chosen] = fused::best_slice_rows(shape, gpus, order, machine, model, bag_length);
  state.counters["chosen_slice_rows"] = static_cast<double>(best);
  state.counters["chosen_slice_normalised"] = chosen.fused / chosen.baseline;
  state.counters["chosen_slice_overlap_efficiency"] = chosen.overlap_efficiency();
  state.counters["node0_us"] = t.fused_by_rank[0] * 1e6;
  state.counters["node1_us"] = t.fused_by_rank[1] * 1e6;
}

void register_model() {
  for (const std::int64_t pooling : {10, 70})
    for (const std::int64_t batch : {256, 512, 1024, 2048, 4096})
      for (const int tables : {16, 64, 256})
        benchmark::RegisterBenchmark(("model/" + std::string(pooling == 10 ? "grid/" : "grid_pooling70/") +
                                      std::to_string(batch) + "/" + std::to_string(tables))
                                         .c_str(),
                                     [=](benchmark::State& s) { report_model(s, batch, tables, 32, pooling); })
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond)
            ->Iterations(1);
  for (const std::int64_t slice : {1, 2, 4, 8, 16, 32, 64, 128, 256})
    benchmark::RegisterBenchmark(("model/slices/" + std::to_string(slice)).c_str(),
                                 [=](benchmark::State& s) { report_model(s, 1024, 256, slice, 10); })
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond)
        ->Iterations(1);
  for (const std::int64_t batch : {256, 512, 1024, 2048, 4096})
    for (const int tables : {16, 64, 256})
      for (const auto order : {fused::slice_order::communication_aware, fused::slice_order::oblivious})
        benchmark::RegisterBenchmark(("model/order/" + std::to_string(batch) + "/" + std::to_string(tables) + "/" +
                                      (order == fused::slice_order::oblivious ? "oblivious" : "aware"))
                                         .c_str(),
                                     [=](benchmark::State& s) { report_model(s, batch, tables, 32, 10, order); })
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond)
            ->Iterations(1);
  for (const modelled_machine nodes : {modelled_machine{8, 1}, modelled_machine{8, 4}})
    for (const std::int64_t batch : {256, 1024, 4096})
      for (const int tables : {16, 64})
        benchmark::RegisterBenchmark(
            ("model/scale/" + std::to_string(nodes.gpus) + "x" + std::to_string(nodes.gpus_per_node) + "/" +
             std::to_string(batch) + "/" + std::to_string(tables))
                .c_str(),
            [=](benchmark::State& s) {
              report_model(s, batch, tables, 32, 10, fused::slice_order::communication_aware, nodes);
            })
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond)
            ->Iterations(1);
  for (const std::int64_t batch : {2, 8, 64})
    for (const int tables : {1, 16})
      for (const std::int64_t slice : {1, 4, 32})
        benchmark::RegisterBenchmark(
            ("model/small/" + std::to_string(batch) + "/" + std::to_string(tables) + "/" + std::to_string(slice))
                .c_str(),
            [=](benchmark::State& s) { report_model(s, batch, tables, slice, 10); })
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond)
            ->Iterations(1);
}

// Wall time on threads and on MPI: every rank builds its tables and bags, then runs the chosen path.
struct measured_configuration {
  std::string name;
  int tables_per_rank;
  int dimension;
  std::int64_t batch;
  std::int64_t bag_length;
  int table_rows;
  long long iterations;
  bool on_mpi;  // measured on MPI too (a few shapes: MPI's runs are the longer)
  // Tables of these rows each, in place of tables_per_rank tables of table_rows, with bags drawn as
  // data::dlrm_generator draws them (Zipf) in place of a stride through the table.
  std::vector<std::int64_t> rows_of_tables{};
};
constexpr int measured_ranks = 8;

// A path of the operator (or it and the baseline in pairs), whether it may store into the peers'
// outputs where they share memory, and in groups of how many ranks (0: all).
struct measured_path {
  const char* name;
  fused::path choice;
  bool share_memory;
  int ranks_per_node;
  bool paired = false;
  bool pooling_alone = false;  // paired: the pooling alone in place of the operator's first path
};
// The last two only on MPI: every slice sent as a message, and the 8 processes grouped as two nodes of
// 4 (stores within, messages between), the paper's two-node setup on one machine.
constexpr measured_path paths[] = {{"fused", fused::path::fused, true, 0},
                                   {"baseline", fused::path::baseline, true, 0},
                                   {"automatic", fused::path::automatic, true, 0},
                                   {"paired", fused::path::fused, true, 0, true},
                                   {"automatic_paired", fused::path::automatic, true, 0, true},
                                   {"pooling_paired", fused::path::baseline, true, 0, true, true},
                                   {"fused_messages", fused::path::fused, false, 0},
                                   {"fused_two_nodes", fused::path::fused, true, measured_ranks / 2}};
constexpr int paths_on_threads = 6;
// The shapes whose pooling alone is measured (pooling_paired/…).
constexpr std::array<std::string_view, 10> floor_shapes = {"/8",
                                                           "/sweep/256/16/10",
                                                           "/sweep/256/64/10",
                                                           "/sweep/256/256/10",
                                                           "/sweep/1024/64/10",
                                                           "/sweep/4096/16/10",
                                                           "/sweep/4096/64/10",
                                                           "/sweep/1024/256/10",
                                                           "/criteo_kaggle/2048",
                                                           "/criteo_kaggle/16384"};

double median(std::vector<double> values) {
  const auto middle = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
  std::nth_element(values.begin(), middle, values.end());
  return *middle;
}

// paired/…, automatic_paired/… and pooling_paired/…: `iterations` pairs of calls on `op`, fused() (or
// operator(), once its trial is over, or the pooling alone) and baseline(), the first of them first in
// every other pair.
template <class Comm, class Operator, class Tables, class Bags>
void measure_pairs(Comm& comm, benchmark::State* state, long long iterations, Operator& op, const Tables& tables,
                   const Bags& bags, const measured_path& which) {
  const bool automatic = which.choice == fused::path::automatic;
  const auto first_path = [&] {
    if (which.pooling_alone) return op.pooling_alone(tables, bags);
    return automatic ? op(tables, bags) : op.fused(tables, bags);
  };
  while (automatic && op.measuring()) (void)op(tables, bags);
  // Each path's first calls choose how it stores its rows (embedding_all_to_all::forward_row_stores).
  while (op.measuring_row_stores(fused::path::automatic)) {
    (void)op.fused(tables, bags);
    (void)op.baseline(tables, bags);
  }
  // Two calls of each path, so each path has written both outputs (see measure_path).
  for (int call = 0; call < 4; ++call) (void)(call < 2 ? first_path() : op.baseline(tables, bags));
  std::vector<double> first_seconds, baseline_seconds;
  const auto pair = [&] {
    const bool first_first = first_seconds.size() % 2 == 0;
    std::array<double, 2> seconds{};  // first path, baseline
    for (const bool first : {first_first, !first_first})
      seconds[first ? 0 : 1] = bench::slowest(
          comm, [&] { benchmark::DoNotOptimize((first ? first_path() : op.baseline(tables, bags)).data()); });
    first_seconds.push_back(seconds[0]);
    baseline_seconds.push_back(seconds[1]);
    return seconds[0] + seconds[1];
  };
  if (state == nullptr) {
    for (long long i = 0; i < iterations; ++i) pair();
    return;
  }
  for (auto _ : *state) state->SetIterationTime(pair());
  std::vector<double> ratios;
  for (std::size_t i = 0; i < first_seconds.size(); ++i) ratios.push_back(first_seconds[i] / baseline_seconds[i]);
  const std::string first = which.pooling_alone ? "pooling" : automatic ? "automatic" : "fused";
  state->counters[first + "_ms"] = 1e3 * median(first_seconds);
  state->counters["baseline_ms"] = 1e3 * median(baseline_seconds);
  state->counters[first + "_over_baseline"] = median(ratios);
  if (automatic) state->counters["fuses"] = op.fuses() ? 1 : 0;
  // How each path chose to store its rows: 1 around the caches, 0 through them.
  for (const auto& [name, path] :
       {std::pair{"fused_streams", fused::path::fused}, {"baseline_streams", fused::path::baseline}})
    state->counters[name] = op.forward_row_stores(path) == fused::row_stores::streaming ? 1 : 0;
}

// Each table's lookups for the global batch of a configuration with rows_of_tables, bags of
// c.bag_length drawn as data::dlrm_generator draws them; made once for all ranks and kept.
const std::vector<std::vector<std::int64_t>>& drawn_indices(const measured_configuration& c) {
  static std::mutex made;
  static std::map<std::string, std::vector<std::vector<std::int64_t>>> by_configuration;
  const std::scoped_lock lock(made);
  auto [at, inserted] = by_configuration.try_emplace(c.name);
  if (inserted) {
    const data::dlrm_generator generator({.dense_features = 0,
                                          .table_rows = c.rows_of_tables,
                                          .min_bag_length = c.bag_length,
                                          .max_bag_length = c.bag_length});
    for (int t = 0; t < generator.tables(); ++t) {
      auto& table = at->second.emplace_back();
      for (std::int64_t sample = 0; sample < c.batch; ++sample)
        for (std::int64_t i = 0; i < c.bag_length; ++i)
          table.push_back(generator.index(data::dlrm_stream::training, sample, t, i));
    }
  }
  return at->second;
}

// One rank's part of a measurement; `state` on the reporting rank only.
template <class Comm>
void measure_path(Comm& comm, benchmark::State* state, const measured_path& which, const measured_configuration& c) {
  fused::embedding_options options;
  options.choice = which.choice;
  options.share_memory = which.share_memory;
  options.ranks_per_node = which.ranks_per_node;
  const bool drawn = !c.rows_of_tables.empty();
  const auto* drawn_bags = drawn ? &drawn_indices(c) : nullptr;
  const int tables = drawn ? static_cast<int>(c.rows_of_tables.size()) : comm.size() * c.tables_per_rank;
  fused::embedding_all_to_all op(comm, {tables, c.dimension, c.batch}, options);
  const int first_table = op.plan().first_table(comm.rank());
  // The tables as the library's embedding layer keeps them (storage of the rank, 64-byte aligned): a
  // large std::vector starts 16 bytes past a line, so each 256-byte row spans five lines, not four.
  std::vector<shared_buffer<float>> weights;
  std::vector<std::int64_t> offsets, indices;
  for (std::int64_t b = 0; b <= c.batch; ++b) offsets.push_back(b * c.bag_length);
  if (!drawn)
    for (std::int64_t i = 0; i < c.batch * c.bag_length; ++i)
      indices.push_back((i * 7919 + comm.rank()) % c.table_rows);
  std::vector<std::span<const float>> table_spans;
  std::vector<fused::embedding_bags> bags;
  for (int t = 0; t < op.plan().tables_of(comm.rank()); ++t) {
    const auto rows = drawn ? c.rows_of_tables[static_cast<std::size_t>(first_table + t)] : c.table_rows;
    weights.push_back(
        shared_buffer<float>::zeros(static_cast<std::size_t>(rows) * static_cast<std::size_t>(c.dimension)));
    std::ranges::fill(weights.back().span(), 0.001F * static_cast<float>(t + 1));
    const auto& bag_indices = drawn ? (*drawn_bags)[static_cast<std::size_t>(first_table + t)] : indices;
    bags.push_back({offsets, bag_indices});
  }
  for (const auto& w : weights) table_spans.emplace_back(w.span());
  if (which.paired) {
    measure_pairs(comm, state, c.iterations, op, table_spans, bags, which);
    return;
  }
  // Untimed calls first, whose page faults would otherwise weigh on the few iterations of the large
  // shapes: two, one into each of the outputs the operator takes by turns (an MPI process faults on
  // each page of a peer's output it first stores into, though the owner wrote it when the window was
  // made: page tables are per process), and the buffers each path keeps across calls. The automatic
  // path makes them after its trial, whose fused calls all fall on one output, and every path after its
  // first calls have chosen how it stores its rows.
  for (int after_trial = 0; after_trial < 2;) {
    if (!op.measuring() && !op.measuring_row_stores(op.fuses() ? fused::path::fused : fused::path::baseline))
      ++after_trial;
    op(table_spans, bags);
  }
  bench::measure(state, c.iterations, comm, [&] { benchmark::DoNotOptimize(op(table_spans, bags).data()); });
  if (state != nullptr) state->counters["fuses"] = op.fuses() ? 1 : 0;
}

std::vector<measured_configuration> configurations() {
  std::vector<measured_configuration> all{{"/8", 4, 64, 2048, 10, 20000, 30, true}};
  // The model's embedding dimension and bags of 10, on its grid (global batch 256-4096 × 16, 64, 256
  // tables per rank) where it fits this machine's 24 GiB: up to 262144 bags of each rank's tables (a
  // call's output 2 GiB, four times that with the operator's second output and the baseline's
  // buffers, beside 4 GiB of tables at 256 tables; 2048 and 4096 × 256 would not fit). Beyond the grid:
  // 2 tables per rank, where the output is small, and single lookups at batch 256, 1024, 4096 × 2,
  // 16, 64 tables, where pooling is light beside the output's movement. MPI measures a few shapes (its
  // runs are the longer).
  for (const std::int64_t bag_length : {10, 1})
    for (const int tables : {2, 16, 64, 256})
      for (const std::int64_t batch : {256, 512, 1024, 2048, 4096}) {
        // The shapes measured before the grid was extended (single lookups and MPI keep to them).
        const bool first_shapes =
            (batch == 256 || batch == 1024 || batch == 4096) && tables <= 64 && batch * tables <= 65536;
        if (batch * tables > 262144 || (bag_length == 1 && !first_shapes)) continue;
        const double bytes =
            static_cast<double>(batch * measured_ranks * tables * (bag_length + 3) * embedding_dimension) * 4;
        const auto iterations = static_cast<long long>(std::clamp(2e10 / bytes, 5.0, 50.0));
        const bool on_mpi =
            first_shapes && (bag_length == 10 ? tables == 16 || batch == 1024 : tables == 16 && batch == 1024);
        all.push_back(
            {"/sweep/" + std::to_string(batch) + "/" + std::to_string(tables) + "/" + std::to_string(bag_length),
             tables, embedding_dimension, batch, bag_length, 2048, iterations, on_mpi});
      }
  // Criteo's Kaggle click logs as DLRM trains on them (facebookresearch/dlrm,
  // bench/dlrm_s_criteo_kaggle.sh): 26 tables of these rows (the dataset's categories per feature,
  // 33.8 million in all), dimension 16, a single lookup a table per sample, the tables cut over the
  // ranks evenly by count (3 or 4 a rank, so a rank's tables hold 8 thousand to 10 million rows).
  const std::vector<std::int64_t> criteo_kaggle = {1460,  583,  10131227, 2202608, 305, 24,     12517,   633,   3,
                                                   93145, 5683, 8351593,  3194,    27,  14992,  5461306, 10,    5652,
                                                   2173,  4,    7046547,  18,      15,  286181, 105,     142572};
  for (const std::int64_t batch : {2048, 16384})
    all.push_back({"/criteo_kaggle/" + std::to_string(batch), 0, 16, batch, 1, 0, 50, false, criteo_kaggle});
  return all;
}

#ifdef SHARDWISE_BENCH_MPI
// What rank 0 tells the others before each MPI measurement (mpi_orders.hpp); ranks = 0 ends the program.
struct command {
  int configuration = 0;
  int path = 0;
  int ranks = 0;
};

void run_on_mpi(mpi::communicator& part, const command& order, benchmark::State* state) {
  const auto all = configurations();
  measure_path(part, state, paths[order.path], all[static_cast<std::size_t>(order.configuration)]);
}
#endif

// threads/<path><name> for every configuration; mpi/<path><name> (8 processes) for some, where built
// with MPI and run under mpiexec with 8 ranks or more.
template <class Driver>
void register_measured([[maybe_unused]] Driver* driver, [[maybe_unused]] int world_size) {
  const auto all = configurations();
  for (std::size_t i = 0; i < all.size(); ++i)
    for (int p = 0; p < static_cast<int>(std::size(paths)); ++p) {
      const auto& c = all[i];
      // The pooling alone where docs/fused.md asks what limits the forward: the original configuration,
      // the grid's largest shapes and Criteo's.
      if (paths[p].pooling_alone && std::ranges::find(floor_shapes, c.name) == floor_shapes.end()) continue;
      if (p < paths_on_threads)
        benchmark::RegisterBenchmark(("threads/" + std::string(paths[p].name) + c.name).c_str(),
                                     [p, c](benchmark::State& s) {
                                       threads::run(measured_ranks, [&](threads::communicator& comm) {
                                         measure_path(comm, comm.rank() == 0 ? &s : nullptr, paths[p], c);
                                       });
                                     })
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond)
            ->Iterations(c.iterations);
#ifdef SHARDWISE_BENCH_MPI
      if (!c.on_mpi || world_size < measured_ranks || paths[p].pooling_alone) continue;
      benchmark::RegisterBenchmark(
          ("mpi/" + std::string(paths[p].name) + c.name).c_str(),
          [driver, i, p](benchmark::State& s) { driver->run(command{static_cast<int>(i), p, measured_ranks}, &s); })
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond)
          ->Iterations(c.iterations);
#endif
    }
}

}  // namespace

int main(int argc, char** argv) {
#ifdef SHARDWISE_BENCH_MPI
  return bench::run_benchmarks(argc, argv, run_on_mpi, [](auto& driver, int world_size) {
    register_model();
    register_measured(&driver, world_size);
    return true;
  });
#else
  return bench::run_benchmarks(argc, argv, [] {
    register_model();
    register_measured<void>(nullptr, 1);
    return true;
  });
#endif
}
