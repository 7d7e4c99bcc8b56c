// Example 08: plan a GPT training run before buying the machine time — rank every way of laying the
// model out on N devices by its simulated step time, and drop the ways that do not fit in memory.
//
//   build/examples/08_plan_gpt                                    64 V100s, a GPT of 8 blocks
//   build/examples/08_plan_gpt --preset mi210 --devices 16 --layers 24 --hidden 2048 --heads 16
//   build/examples/08_plan_gpt --preset mi210 --precision bf16  bf16 weights and activations
//   build/examples/08_plan_gpt --preset h100 --devices 64 --precision bf16   8 DGX H100 nodes
//   build/examples/08_plan_gpt --check                            this machine: the plan against threads
//
// A mesh is data replicas x a tensor-parallel grid (1-D, with or without sequence parallelism, 2-D or
// 3-D), with the optimizer's update sharded across the replicas or replicated, and the replica's batch
// in 1, 2, 4 ... micro-batches; a mesh over the device's memory is tried again with its blocks
// recomputing attention's probabilities in the backward pass, and if it is still over, all their
// activations (gpt_config::recompute): the first costs one more QKᵀ and softmax a block, the second one
// more forward pass and keeps one block's activations at a time. A sequence-parallel mesh is tried with
// its collective products as rings and unfused (gpt_config::products), and keeps the faster that fits
// ("unfused" after its name when that is the unfused form). In bf16 (--precision bf16, on devices
// with bf16 matrix units) the model's weights and activations are bf16 and its products run at the
// units' rate, while gradients, master weights and the optimizer's state stay float32, as
// mixed-precision training keeps them.
// Each is one training step of model::gpt (forward, backward, AdamW with clipping) run shapes only on
// the simulated cluster (sim_gpu::execution::shapes_only: every kernel and transfer priced, no values
// computed), whose report gives the step's time and each device's memory high-water mark: weights,
// gradients, optimizer state and activations. --check does the same with a model of this machine and
// then runs each mesh on threads, so the ranking can be compared with measured time.
//
// Read top to bottom: options, the machines, the meshes, one training step (the same code simulated
// and measured), then main.
#include <malloc.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "options.hpp"
#include "progress.hpp"
#include "shardwise/comm/threads.hpp"
#include "shardwise/mesh/data_parallel_mesh.hpp"
#include "shardwise/mesh/shape.hpp"
#include "shardwise/model/gpt.hpp"
#include "shardwise/nn/recomputation.hpp"
#include "shardwise/ops/gemm_rate.hpp"
#include "shardwise/ops/matmul.hpp"
#include "shardwise/optim/adamw.hpp"
#include "shardwise/optim/sharded.hpp"
#include "shardwise/sim/presets.hpp"
#include "shardwise/sim/sim_gpu.hpp"

namespace sw = shardwise;

namespace {

// ---- options

struct options {
  std::string preset = "v100";
  std::string precision = "float";  // of the model's weights and activations: float or bf16
  int devices = 64;
  sw::model::gpt_config model{.vocabulary = 50304, .context = 1024, .hidden = 1536, .heads = 16, .layers = 8};
  long batch = 256;       // sequences per step, over all replicas
  double memory_gib = 0;  // per device; 0: the preset's
  int top = 0;            // rows of the table; 0: all
  std::string only;       // plan only the meshes whose name contains it; empty: all
  bool check = false;     // plan on this machine's model, then measure each mesh on threads
  int check_steps = 10;   // measured steps per mesh and round, after one to warm up
  int check_rounds = 3;   // every mesh measured once a round; its time is the median of its rounds'
};

constexpr const char* options_text =
    "Ranks every mesh of a GPT on N simulated devices (data replicas x a 1-D, sequence-parallel, 2-D or 3-D\n"
    "grid; sharded or replicated update; 1, 2, 4 or 8 micro-batches) by the simulated time of one training\n"
    "step, and drops the meshes whose fullest device is over its memory (docs/planner.md).\n"
    "options: --preset v100|mi210|a100|h100|tpu|cpu  --devices N  --precision float|bf16\n"
    "         --layers N  --hidden N  --heads N  --context N  --vocabulary N\n"
    "         --batch N (sequences per step, over all replicas)  --memory-gib X (per device; by default the preset's)\n"
    "         --top N (rows of the table; by default all)  --only TEXT (only the meshes whose name contains it,\n"
    "         as \"1d-sp:8\")  --check  --check-steps N  --check-rounds N  --help (-h)\n"
    "(--check: the cpu preset, a device per core but at least 4, and a small model unless given)\n";

const sw::examples::command_line command_line{"08_plan_gpt", options_text};

[[noreturn]] void usage(const std::string& problem) { command_line.refuse(problem); }

options parse(int argc, char** argv) {
  options o;
  using sw::examples::read_into, sw::examples::read_one_of, sw::examples::read_positive_into;
  const auto given = command_line.read(argc, argv,
                                       {
                                           {"--preset", read_into(o.preset)},
                                           {"--precision", read_one_of(o.precision, {"float", "bf16"})},
                                           {"--devices", read_positive_into(o.devices)},
                                           {"--layers", read_positive_into(o.model.layers)},
                                           {"--hidden", read_positive_into(o.model.hidden)},
                                           {"--heads", read_positive_into(o.model.heads)},
                                           {"--context", read_positive_into(o.model.context)},
                                           {"--vocabulary", read_positive_into(o.model.vocabulary)},
                                           {"--batch", read_positive_into(o.batch)},
                                           {"--memory-gib", read_positive_into(o.memory_gib)},
                                           {"--top", read_positive_into(o.top)},
                                           {"--only", read_into(o.only)},
                                           {"--check-steps", read_positive_into(o.check_steps)},
                                           {"--check-rounds", read_positive_into(o.check_rounds)},
                                       },
                                       {{"--check", &o.check}});
  const auto any_given = [&](std::initializer_list<std::string_view> flags) {
    return std::any_of(flags.begin(), flags.end(), [&](std::string_view flag) { return given.contains(flag); });
  };
  const bool devices_given = given.contains("--devices"), batch_given = given.contains("--batch");
  const bool model_given = any_given({"--layers", "--hidden", "--heads", "--context", "--vocabulary"});
  if (o.check) {
    // Small enough to run every mesh for real in seconds; a device per core, and at least 4, so that
    // 1-D, 2-D and 3-D grids all have a mesh to be ranked.
    o.preset = "cpu";
    if (!devices_given) o.devices = std::max(4, static_cast<int>(std::thread::hardware_concurrency()));
    if (!model_given) o.model = {.vocabulary = 256, .context = 64, .hidden = 128, .heads = 4, .layers = 2};
    if (!batch_given) o.batch = 16;
  }
  // The model's own shape, which no mesh can mend: said once here rather than by every mesh.
  if (o.model.hidden % o.model.heads != 0)
    usage("--hidden " + std::to_string(o.model.hidden) + " does not split into --heads " +
          std::to_string(o.model.heads) + " heads of whole columns");
  return o;
}

// ---- the machines

struct cluster {
  sw::sim::machine machine;
  double memory_bytes;  // per device
  std::string description;
};

// This machine as a simulator model, measured now: a device per core, whose GEMM rate and memory
// bandwidth are one core's (shared when there are more devices than cores), joined by shared memory
// (a copy's bandwidth, and the latency of a one-element all-reduce between two threads). Each is the
// best of repeated tries over 300 ms, as measured_gemm_flops takes its rate, so a moment's interruption
// does not move it: with the best of five copies, this VM's bandwidth came out anywhere from 4.8 to
// 11.7 GB/s, and the simulated steps with it.
cluster this_machine(int devices) {
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const double share = static_cast<double>(std::min(cores, devices)) / devices;
  using clock = std::chrono::steady_clock;
  constexpr auto trying = std::chrono::milliseconds(300);
  std::vector<char> from(std::size_t{64} << 20, 1), to(from.size());
  double copy_rate = 0;
  for (const auto until = clock::now() + trying; clock::now() < until;) {
    const auto start = clock::now();
    std::memcpy(to.data(), from.data(), from.size());
    const double seconds = std::chrono::duration<double>(clock::now() - start).count();
    copy_rate = std::max(copy_rate, static_cast<double>(from.size()) / seconds);
  }
  // Both threads agree on when to stop (rank 0's clock, broadcast), so they run as many all-reduces.
  double all_reduce_seconds = std::numeric_limits<double>::infinity();
  sw::threads::run(2, [&](sw::threads::communicator& world) {
    double value = 1;
    constexpr int repeats = 100;
    const auto until = clock::now() + trying;
    for (int more = 1; more != 0;) {
      world.barrier();
      const auto start = clock::now();
      for (int r = 0; r < repeats; ++r) world.all_reduce(std::span<double>(&value, 1));
      const double seconds = std::chrono::duration<double>(clock::now() - start).count() / repeats;
      if (world.rank() == 0) all_reduce_seconds = std::min(all_reduce_seconds, seconds);
      more = world.rank() == 0 && clock::now() < until ? 1 : 0;
      world.broadcast(std::span<int>(&more, 1), 0);
    }
  });
  const sw::sim::device_model core{sw::measured_gemm_flops() * share, 2 * copy_rate * share, 0.0};
  const sw::sim::link_model shared_memory{copy_rate * share, all_reduce_seconds / 2, "shared memory"};
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  char text[160];
  std::snprintf(text, sizeof text, "this machine: %d device(s) on %d core(s), %.1f GFLOP/s and %.1f GB/s each", devices,
                cores, core.peak_flops / 1e9, core.memory_bandwidth / 1e9);
  return {{core, sw::sim::topology::fully_connected(devices, shared_memory)},
          static_cast<double>(pages) * static_cast<double>(page) / devices,
          text};
}

constexpr double gib = 1024.0 * 1024.0 * 1024.0;

// The GPUs a node of `o.preset`'s clusters holds, `node` (4 V100s or MI210s, a DGX's 8): all n when
// n fit in one, and `--devices` must otherwise fill whole nodes (n GPUs on one node's links would be a
// machine no vendor builds).
int gpus_per_node(const options& o, int node) {
  if (o.devices > node && o.devices % node != 0)
    usage("--preset " + o.preset + " has nodes of " + std::to_string(node) + " GPUs: --devices is " +
          std::to_string(node) + " or fewer, or a multiple of " + std::to_string(node) + ", not " +
          std::to_string(o.devices));
  return std::min(o.devices, node);
}

// The presets of sim/presets.hpp with their devices' memory (vendors' datasheets, docs/planner.md).
cluster preset_cluster(const options& o) {
  const int n = o.devices;
  if (o.preset == "v100") {
    const int per_node = gpus_per_node(o, 4);
    return {sw::sim::presets::v100_nodes(n, per_node), 16 * gib,
            std::to_string(n) + " V100 SXM2 16 GB, " + std::to_string(per_node) +
                " per node on NVLink 2, nodes on one EDR InfiniBand NIC each"};
  }
  if (o.preset == "mi210") {
    const int per_node = gpus_per_node(o, 4);
    return {sw::sim::presets::mi210_nodes(n, per_node), 64 * gib,
            std::to_string(n) + " MI210 64 GB, " + std::to_string(per_node) + " per node on xGMI, InfiniBand between"};
  }
  if (o.preset == "a100" || o.preset == "h100") {
    const bool a100 = o.preset == "a100";
    const int per_node = gpus_per_node(o, 8);
    return {a100 ? sw::sim::presets::a100_nodes(n, per_node) : sw::sim::presets::h100_nodes(n, per_node), 80 * gib,
            std::to_string(n) + (a100 ? " A100 SXM4 80 GB, " : " H100 SXM5 80 GB, ") + std::to_string(per_node) +
                " per node on NVSwitch, an InfiniBand NIC per GPU (" + (a100 ? "HDR 200" : "NDR 400") + " Gb/s)"};
  }
  if (o.preset == "tpu") {
    int rows = static_cast<int>(std::sqrt(n));
    while (n % rows != 0) --rows;
    return {sw::sim::presets::tpu_v3_pod(rows, n / rows), 32 * gib,
            "a TPU v3 slice of " + std::to_string(rows) + " x " + std::to_string(n / rows) +
                " chips, 32 GB each, in a 2-D torus"};
  }
  if (o.preset == "cpu") return this_machine(n);
  usage("--preset is v100, mi210, a100, h100, tpu or cpu, not " + o.preset);
}

cluster cluster_of(const options& o) {
  cluster c = preset_cluster(o);
  if (o.memory_gib > 0) c.memory_bytes = o.memory_gib * gib;
  if (o.precision == "bf16" && c.machine.device.bf16_matrix_flops <= 0)
    usage("--precision bf16 needs devices with bf16 matrix units, and the " + o.preset + " preset's have none" +
          (o.preset == "v100" ? " (a V100's tensor cores take fp16)" : "") + "; plan it in float");
  return c;
}

// ---- the meshes

enum class family { one_d, one_d_sequence_parallel, two_d, three_d };

struct mesh_choice {
  int data = 1;
  family tensor_family = family::one_d;
  std::vector<int> grid;  // the tensor-parallel grid's extents
  bool sharded = true;    // the update sharded across the replicas, or replicated
  long micro_batches = 1;
  sw::nn::recomputation recompute = sw::nn::recomputation::none;  // what the blocks' backward computes again
  // Sequence parallelism's collective products: rings, or the whole collective beside the GEMM.
  sw::collective_matmul_form collective = sw::collective_matmul_form::ring;

  [[nodiscard]] int grid_size() const {
    int size = 1;
    for (const int extent : grid) size *= extent;
    return size;
  }
  // How many blocks of whole samples the family's activations cut a micro-batch's rows into (sequence
  // parallelism cuts tokens, padded: any number).
  [[nodiscard]] int row_blocks() const { return grid.size() == 1 ? 1 : grid.size() == 2 ? grid[0] : grid[0] * grid[1]; }
  [[nodiscard]] std::string name() const {
    return "data " + std::to_string(data) + " x " +
           (tensor_family == family::one_d_sequence_parallel ? "1d-sp" : std::to_string(grid.size()) + "d") + ":" +
           sw::shape_string(grid) + (collective == sw::collective_matmul_form::unfused ? " unfused" : "");
  }
  [[nodiscard]] std::string label() const {
    return name() + (sharded ? ", sharded" : ", replicated") + " update, " + std::to_string(micro_batches) +
           " micro-batch" + (micro_batches > 1 ? "es" : "") +
           (recompute == sw::nn::recomputation::none ? "" : ", " + std::string(sw::nn::describe(recompute)));
  }
};

// Every grid of each family on t devices: 1-D t, and with sequence parallelism where t > 1; 2-D q x q
// (SUMMA's square); 3-D p x q x q with q > 1 (the cube keeps its vectors on the diagonal of its last two
// axes).
std::vector<std::pair<family, std::vector<int>>> grids(int t) {
  std::vector<std::pair<family, std::vector<int>>> result{{family::one_d, {t}}};
  if (t > 1) result.push_back({family::one_d_sequence_parallel, {t}});
  for (int q = 2; q * q <= t; ++q) {
    if (q * q == t) result.push_back({family::two_d, {q, q}});
    if (t % (q * q) == 0) result.push_back({family::three_d, {t / (q * q), q, q}});
  }
  return result;
}

// More micro-batches than this only add launches to a step that already fits.
constexpr long max_micro_batches = 8;

struct mesh_search {
  std::vector<mesh_choice> meshes;
  std::vector<std::string> not_planned;  // the replica counts and grids the batch cannot be split for, and why
};

// Data x grid for every grid size dividing the devices, each update, and 1, 2, 4 or 8 micro-batches
// that split the replica's batch into whole samples for every row block. A replica count or a grid
// that no such split exists for is named in not_planned, so that the plan does not leave it out unseen.
mesh_search meshes(int devices, long batch) {
  const auto sequences = [](long n) { return std::to_string(n) + (n == 1 ? " sequence" : " sequences"); };
  mesh_search result;
  for (int t = 1; t <= devices; ++t) {
    if (devices % t != 0) continue;
    const int data = devices / t;
    if (batch % data != 0) {
      result.not_planned.push_back("data " + std::to_string(data) + ", with every grid of " + std::to_string(t) + ": " +
                                   sequences(batch) + " a step cannot be split among " + std::to_string(data) +
                                   " replicas");
      continue;
    }
    for (const auto& [tensor_family, grid] : grids(t)) {
      const std::size_t planned_before = result.meshes.size();
      for (const bool sharded : {true, false}) {
        if (data == 1 && !sharded) continue;  // one replica: the two updates are the same
        for (long micro = 1; micro <= std::min(batch / data, max_micro_batches); micro *= 2) {
          mesh_choice m{data, tensor_family, grid, sharded, micro};
          const long micro_batch = batch / data / micro;
          if (batch / data % micro == 0 && micro_batch % m.row_blocks() == 0) result.meshes.push_back(m);
        }
      }
      // One micro-batch splits whenever any number does.
      if (result.meshes.size() == planned_before) {
        const mesh_choice m{data, tensor_family, grid};
        result.not_planned.push_back(m.name() + ": a replica's " + sequences(batch / data) +
                                     " cannot be split into the grid's " + std::to_string(m.row_blocks()) +
                                     " row blocks of whole sequences");
      }
    }
  }
  return result;
}

// ---- one training step, the same code simulated and measured

// `steps` training steps of the GPT on the mesh (forward and backward per micro-batch, then the
// update with clipping), each timed by `now` (a clock every rank reads after all ranks have finished
// what came before), with T the model's element type. Returns the steps' times.
template <class T, class Family, sw::optim::weight_update Mode, class Communicator, class Clock>
std::vector<double> train_steps(Communicator& world, const mesh_choice& m, const options& o, int steps, Clock now) {
  constexpr std::size_t dimensions = Family::mesh_dimensions;
  sw::coordinates<dimensions> shape{};
  std::copy(m.grid.begin(), m.grid.end(), shape.begin());
  sw::data_parallel_mesh mesh(world, m.data, shape);
  using tensor_parallel_mesh = std::remove_cvref_t<decltype(mesh.tensor_parallel())>;
  sw::model::gpt_config config = o.model;
  config.recompute = m.recompute;
  config.products.collective = m.collective;
  sw::model::gpt<T, Family, tensor_parallel_mesh> model(mesh.tensor_parallel(), config);
  sw::optim::data_parallel_update<sw::optim::adamw, Mode, T> update(model, mesh.data());

  // Token ids only choose which embedding rows are read; their values do not change the cost.
  const long micro_batch = o.batch / m.data / m.micro_batches;
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(micro_batch * o.model.context));
  for (std::size_t t = 0; t < tokens.size(); ++t)
    tokens[t] = static_cast<std::int32_t>((t * 7919 + static_cast<std::size_t>(mesh.replica())) %
                                          static_cast<std::size_t>(o.model.vocabulary));
  std::vector<double> times;
  for (int step = 0; step < steps; ++step) {
    const double start = now(world);
    for (long micro = 0; micro < m.micro_batches; ++micro) {
      (void)model.forward(tokens, tokens);
      model.backward(1.0f / static_cast<float>(m.micro_batches));
    }
    (void)update.step(mesh.data(), mesh.tensor_parallel().world(), {.learning_rate = 1e-4f, .clip_norm = 1.0f});
    times.push_back(now(world) - start);
  }
  return times;
}

// Calls visit.template operator()<T, Family, Mode>() for the mesh's family and update.
template <class T, class Visit>
auto with_types(const mesh_choice& m, Visit&& visit) {
  const auto by_update = [&]<class Family>() {
    return m.sharded ? visit.template operator()<T, Family, sw::optim::weight_update::sharded>()
                     : visit.template operator()<T, Family, sw::optim::weight_update::replicated>();
  };
  switch (m.tensor_family) {
    case family::one_d: return by_update.template operator()<sw::nn::tensor_parallel_1d<>>();
    case family::one_d_sequence_parallel:
      return by_update.template operator()<sw::nn::sequence_parallel_1d<sw::padded>>();
    case family::two_d: return by_update.template operator()<sw::nn::tensor_parallel_2d<>>();
    case family::three_d: return by_update.template operator()<sw::nn::tensor_parallel_3d<>>();
  }
  throw std::logic_error("08_plan_gpt: unknown family");
}

struct simulated_step {
  double seconds = 0;
  double memory_bytes = 0;  // the largest high-water mark of any device
  std::string refused;      // why the grid cannot cut the model, if it cannot
};

simulated_step simulate(const mesh_choice& m, const options& o, const cluster& c) {
  simulated_step result;
  try {
    const auto report = sw::sim_gpu::run(
        o.devices, c.machine,
        [&](sw::sim_gpu::communicator& world) {
          const auto synchronized_now = [](sw::sim_gpu::communicator& w) { return w.synchronized_now(); };
          const auto step = [&]<class T, class Family, sw::optim::weight_update Mode>() {
            return train_steps<T, Family, Mode>(world, m, o, 1, synchronized_now);
          };
          const auto times = o.precision == "bf16" ? with_types<sw::bf16>(m, step) : with_types<float>(m, step);
          if (world.rank() == 0) result.seconds = times.front();
        },
        sw::sim_gpu::execution::shapes_only);
    result.memory_bytes = static_cast<double>(report.largest_memory_high_water());
  } catch (const sw::error& refusal) {
    // The step and why, without "[rank N] " (every rank of the mesh refuses alike, and which is
    // reported depends on which got there first) or the calls it happened inside (the model's forward,
    // a block's, …: the same for every mesh).
    result.refused = refusal.operation() + ": " + refusal.detail();
  }
  return result;
}

// The middle value (the upper of the two middle ones of an even count).
double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// The median of `steps` steps on threads, after one to warm up.
double measure(const mesh_choice& m, const options& o) {
  double step_median = 0;
  sw::threads::run(o.devices, [&](sw::threads::communicator& world) {
    const auto wall_now = [](sw::threads::communicator& w) {
      w.barrier();
      return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    };
    auto times = with_types<float>(m, [&]<class T, class Family, sw::optim::weight_update Mode>() {
      return train_steps<T, Family, Mode>(world, m, o, o.check_steps + 1, wall_now);
    });
    times.erase(times.begin());
    if (world.rank() == 0) step_median = median(times);
  });
  return step_median;
}

struct planned {
  mesh_choice mesh;
  simulated_step simulated;
  double measured_seconds = 0;
  std::size_t listed = 0;  // its place among the candidates, which orders ties
};

// Kendall's tau between the simulated and the measured order: 1 when every pair agrees.
double rank_agreement(const std::vector<planned>& rows) {
  long agree = 0, pairs = 0;
  for (std::size_t i = 0; i < rows.size(); ++i)
    for (std::size_t j = i + 1; j < rows.size(); ++j) {
      const double simulated = rows[i].simulated.seconds - rows[j].simulated.seconds;
      const double measured = rows[i].measured_seconds - rows[j].measured_seconds;
      agree += simulated * measured > 0 ? 1 : -1;
      ++pairs;
    }
  return pairs == 0 ? 1.0 : static_cast<double>(agree) / static_cast<double>(pairs);
}

}  // namespace

int main(int argc, char** argv) try {
  const options o = parse(argc, argv);
  const cluster c = cluster_of(o);
  // The meshes to simulate, those --only names: chosen before anything is printed, so that a refusal
  // comes alone.
  auto [candidates, not_planned] = meshes(o.devices, o.batch);
  const std::size_t all_candidates = candidates.size();
  std::erase_if(candidates, [&](const mesh_choice& m) { return m.name().find(o.only) == std::string::npos; });
  if (candidates.empty() && all_candidates > 0)
    usage("--only " + o.only + " names none of the " + std::to_string(all_candidates) + " meshes of " +
          std::to_string(o.devices) + " devices (named as \"data 8 x 1d-sp:8\")");
  const double tokens_per_step = static_cast<double>(o.batch * o.model.context);
  std::printf(
      "shardwise 08: a GPT of %.1fM parameters (%s),\n"
      "%ld sequences per step, %s, on %s; %.3g GiB per device\n"
      "each mesh: one training step (forward and backward per micro-batch, then AdamW with clipping), shapes only,\n"
      "ranked by its simulated time, fastest first (vs first: how much longer its step is than the first's; a\n"
      "fraction of a percent is finer than the model can tell meshes apart); memory: its fullest device's high-water\n"
      "mark of weights, gradients, AdamW's state, kept activations and working buffers (a framework's own overheads\n"
      "not counted)\n",
      sw::model::parameter_count(o.model) / 1e6, sw::model::describe(o.model).c_str(), o.batch,
      o.precision == "bf16" ? "bf16 weights and activations (float32 gradients, master weights and optimizer state)"
                            : "float32 throughout",
      c.description.c_str(), c.memory_bytes / gib);

  // 1. Every mesh, simulated: one step each, shapes only.
  if (!not_planned.empty()) {
    std::printf("not planned, since the batch does not split for them (--batch):\n");
    for (const auto& why : not_planned) std::printf("  %s\n", why.c_str());
  }
  std::vector<planned> fitting;
  std::vector<std::pair<std::size_t, std::string>> dropped;                  // by their place among the candidates
  std::map<std::string, std::pair<std::size_t, std::string>> refused_grids;  // the first candidate's reason
  const auto wall_start = std::chrono::steady_clock::now();
  // "[12/174, 1:05 left]": the i-th mesh simulated of all, and the time the rest take at the pace so far.
  const auto counter = [&, meshes = candidates.size()](std::size_t i) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
    return "[" + std::to_string(i + 1) + "/" + std::to_string(meshes) + ", " +
           sw::examples::duration(seconds / static_cast<double>(i + 1) * static_cast<double>(meshes - i - 1)) +
           " left]";
  };
  // In a shuffled order (always the same), so that the pace so far is the rest's: listed, the meshes of
  // many replicas and no rings come first and simulate fastest, and the time left began at a tenth of
  // the truth. What the plan prints after the progress lines follows the candidates' order.
  std::vector<std::size_t> order(candidates.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::shuffle(order.begin(), order.end(), std::mt19937(2026));
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const std::size_t listed = order[i];
    mesh_choice m = candidates[listed];
    simulated_step s = simulate(m, o, c);
    // Over the memory: keep no attention probabilities, then one block's activations at a time, if
    // either fits.
    for (const auto recompute : {sw::nn::recomputation::attention, sw::nn::recomputation::block}) {
      if (!s.refused.empty() || s.memory_bytes <= c.memory_bytes) break;
      std::printf("%s %s: %.2f ms, %.3g GiB, over the device's memory; %s\n", counter(i).c_str(), m.label().c_str(),
                  s.seconds * 1e3, s.memory_bytes / gib, std::string(sw::nn::describe(recompute)).c_str());
      m.recompute = recompute;
      s = simulate(m, o, c);
    }
    // Sequence parallelism's products as rings or unfused: the one that fits, or the shorter step when
    // both or neither do.
    if (m.tensor_family == family::one_d_sequence_parallel && s.refused.empty()) {
      mesh_choice unfused = m;
      unfused.collective = sw::collective_matmul_form::unfused;
      const simulated_step u = simulate(unfused, o, c);
      std::printf("%s %s: %.2f ms with the rings, %.2f ms unfused\n", counter(i).c_str(), m.label().c_str(),
                  s.seconds * 1e3, u.seconds * 1e3);
      const auto fits = [&](const simulated_step& step) { return step.memory_bytes <= c.memory_bytes; };
      if (u.refused.empty() && (fits(u) != fits(s) ? fits(u) : u.seconds < s.seconds)) m = unfused, s = u;
    }
    const std::string what = m.label();
    if (!s.refused.empty()) {
      // Its other updates and micro-batches fail alike: the reason of the grid's first candidate is enough.
      if (const auto [first, added] = refused_grids.try_emplace(m.name(), listed, s.refused);
          !added && listed < first->second.first)
        first->second = {listed, s.refused};
      std::printf("%s %s: the grid cannot cut the model (why: under dropped)\n", counter(i).c_str(), what.c_str());
    } else if (s.memory_bytes > c.memory_bytes) {
      char text[96];
      std::snprintf(text, sizeof text, ": %.3g GiB per device", s.memory_bytes / gib);
      dropped.emplace_back(listed, what + text);
      std::printf("%s %s: %.2f ms, %.3g GiB, over the device's memory\n", counter(i).c_str(), what.c_str(),
                  s.seconds * 1e3, s.memory_bytes / gib);
    } else {
      fitting.push_back({m, s, 0, listed});
      std::printf("%s %s: %.2f ms, %.3g GiB\n", counter(i).c_str(), what.c_str(), s.seconds * 1e3,
                  s.memory_bytes / gib);
    }
    std::fflush(stdout);
  }
  std::sort(fitting.begin(), fitting.end(), [](const planned& a, const planned& b) {
    return std::pair(a.simulated.seconds, a.listed) < std::pair(b.simulated.seconds, b.listed);
  });
  for (const auto& [grid, first] : refused_grids) dropped.emplace_back(first.first, grid + ": " + first.second);
  std::sort(dropped.begin(), dropped.end());
  std::printf("simulated %zu meshes in %.1f s", candidates.size(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count());
  if (candidates.size() < all_candidates) std::printf(" (--only %s, of %zu)", o.only.c_str(), all_candidates);
  std::printf("\n");

  // 2. On threads, each mesh that fits, measured (--check). The simulated devices keep their memory
  // from step to step, as a framework's caching allocator does; glibc would instead hand buffers over
  // 128 KB back to the system when freed and fault their pages in again at every step (it doubled the
  // measured step of the largest micro-batches here). The first run in the process also pays for
  // growing the heap: one more run, unrecorded, goes before them. The meshes are measured in rounds,
  // every mesh once a round, so that the machine's drift over the minutes of a check falls on all of
  // them alike rather than on the meshes measured last.
  if (o.check && !fitting.empty()) {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    measure(fitting.front().mesh, o);
    std::vector<std::vector<double>> rounds(fitting.size());
    for (int round = 1; round <= o.check_rounds; ++round)
      for (std::size_t i = 0; i < fitting.size(); ++i) {
        rounds[i].push_back(measure(fitting[i].mesh, o));
        std::printf("measured %s, round %d of %d: %.2f ms\n", fitting[i].mesh.label().c_str(), round, o.check_rounds,
                    rounds[i].back() * 1e3);
        std::fflush(stdout);
      }
    for (std::size_t i = 0; i < fitting.size(); ++i) fitting[i].measured_seconds = median(rounds[i]);
  }

  // 3. The table, fastest first.
  if (!fitting.empty())
    std::printf("\n%4s  %-26s %-11s %6s %10s %11s %9s %11s %11s%s\n", "rank", "mesh", "update", "micro", "recompute",
                "step ms", "vs first", "tokens/s", "memory GiB", o.check ? "  measured ms  measured rank" : "");
  std::vector<double> measured_order;
  measured_order.reserve(fitting.size());
  for (const auto& row : fitting) measured_order.push_back(row.measured_seconds);
  std::sort(measured_order.begin(), measured_order.end());
  const std::size_t shown =
      o.top > 0 ? std::min<std::size_t>(fitting.size(), static_cast<std::size_t>(o.top)) : fitting.size();
  for (std::size_t i = 0; i < shown; ++i) {
    const planned& row = fitting[i];
    std::printf("%4zu  %-26s %-11s %6ld %10s %11.2f %+8.2f%% %11.0f %11.3g", i + 1, row.mesh.name().c_str(),
                row.mesh.sharded ? "sharded" : "replicated", row.mesh.micro_batches,
                std::string(sw::nn::name_of(row.mesh.recompute)).c_str(), row.simulated.seconds * 1e3,
                100 * (row.simulated.seconds / fitting.front().simulated.seconds - 1),
                tokens_per_step / row.simulated.seconds, row.simulated.memory_bytes / gib);
    if (o.check) {
      const auto at = std::lower_bound(measured_order.begin(), measured_order.end(), row.measured_seconds);
      std::printf("  %11.2f  %13td", row.measured_seconds * 1e3, at - measured_order.begin() + 1);
    }
    std::printf("\n");
  }
  if (!dropped.empty()) {
    std::printf("\ndropped %zu:\n", dropped.size());
    for (const auto& entry : dropped) std::printf("  %s\n", entry.second.c_str());
  }
  if (o.check && !fitting.empty()) {
    // The first, the middle and the last mesh by simulated time: does the measured time order them so?
    const planned &first = fitting.front(), &middle = fitting[fitting.size() / 2], &last = fitting.back();
    const bool three_in_order = fitting.size() >= 3 && first.measured_seconds < middle.measured_seconds &&
                                middle.measured_seconds < last.measured_seconds;
    std::printf(
        "\ncheck: Kendall's tau between the simulated and the measured ranking %.2f over %zu meshes;\n"
        "the simulated first, middle and last (%s; %s; %s) are %sin that order measured\n",
        rank_agreement(fitting), fitting.size(), first.mesh.label().c_str(), middle.mesh.label().c_str(),
        last.mesh.label().c_str(), three_in_order ? "" : "not ");
  }
  if (fitting.empty()) {
    std::printf("\nno mesh of %d devices can train this model (each one's reason above)\n", o.devices);
    return 1;
  }
  return 0;
} catch (const std::exception& failure) {
  std::fprintf(stderr, "08_plan_gpt: %s\n", failure.what());
  return 1;
}
