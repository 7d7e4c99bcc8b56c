// Example 07: train a GPT on real text, with data parallelism beside tensor parallelism and a sharded
// optimizer — the three parts of shardwise in one training run.
//
//   scripts/run-example                                  2 ranks as threads: data 2 x 1-D 1
//   build/examples/07_train_gpt --dp 1 --tp 2d:2x2        4 ranks: one replica on a 2x2 grid
//   mpiexec -n 8 build/examples/07_train_gpt --backend mpi --dp 2 --tp 1d:4
//                                                         8 MPI processes (--oversubscribe if needed)
//   build/examples/07_train_gpt --dp 1 --tp 1d:4 --sequence-parallel   activations cut by tokens between sub-blocks
//   build/examples/07_train_gpt --dp 1 --tp 1d:4 --sequence-parallel --collective automatic
//                                                        its rings or unfused collectives, as measured
//   build/examples/07_train_gpt --precision bf16          bf16 weights and activations, float32 master weights
//
// The corpus is the `fortunes` package's quotations (any text file or folder with --data), read as
// bytes: a vocabulary of 256. Every --eval-every steps the run prints the validation loss; at the end,
// a few lines sampled from the model. --checkpoint DIR saves every --checkpoint-every steps; --resume
// DIR continues from the latest checkpoint there, on this run's mesh whatever mesh saved it, and in
// either precision: a checkpoint holds float32 weights (a bf16 run's master weights). Ctrl-C stops the
// ranks after the step they are in, and saves it when --checkpoint is given; a second Ctrl-C ends at once.
// --stop-at-step N and --stop-after-minutes M stop the run so, as planned (a batch job's time limit), and
// --autoresume goes on from the --checkpoint folder where it holds a checkpoint: one command for every
// job of a chain. --log FILE writes every step's metrics as the run goes, kept across stops and resumes.
// A resumed run builds the model its checkpoint holds; --eval-only gives that model's validation loss and
// a sample after --prompt, and trains nothing; --init-from DIR trains a checkpoint's weights afresh
// (another --optimizer, schedule or --data: a fine-tuning run).
//
// Read top to bottom: options, then train() — the mesh, the model, the update, the loop.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "early_stop.hpp"
#include "metrics_log.hpp"
#include "options.hpp"
#include "progress.hpp"
#include "resume.hpp"
#include "shardwise/comm/memory_high_water.hpp"
#include "shardwise/comm/threads.hpp"
#include "shardwise/core/bf16.hpp"
#include "shardwise/data/byte_corpus.hpp"
#include "shardwise/mesh/data_parallel_mesh.hpp"
#include "shardwise/model/gpt.hpp"
#include "shardwise/model/sample.hpp"
#include "shardwise/nn/no_grad.hpp"
#include "shardwise/nn/recomputation.hpp"
#include "shardwise/ops/gemm_rate.hpp"
#include "shardwise/ops/matmul.hpp"
#include "shardwise/optim/adamw.hpp"
#include "shardwise/optim/lamb.hpp"
#include "shardwise/optim/lars.hpp"
#include "shardwise/optim/model_checkpoint.hpp"
#include "shardwise/optim/schedule.hpp"
#include "shardwise/optim/sgd.hpp"
#include "shardwise/optim/sharded.hpp"
#ifdef SHARDWISE_TRAIN_WITH_MPI
#include "shardwise/comm/mpi.hpp"
#endif

namespace sw = shardwise;

namespace {

// ---- options

struct options {
  std::string backend = "threads";
  int data_parallel = 2;
  std::string tensor_parallel = "1d:1";  // 1d:P, 2d:RxC or 3d:PxQxR
  std::vector<int> grid;                 // its extents, from parse()
  bool sequence_parallel = false;        // 1-D only: activations cut by tokens between the sub-blocks
  std::string precision = "float";       // of the weights and activations: float or bf16
  sw::model::gpt_config model;
  long steps = 2500;
  long batch = 8;  // samples per step, over all replicas: small batches learn more per token here
  long micro_batches = 1;
  std::string optimizer = "adamw";
  bool replicated = false;
  float learning_rate = 0;  // 0 until parsed: then --lr, or the optimizer's default_learning_rate
  long warmup = 30;
  float weight_decay = 0.1f;
  float clip_norm = 1.0f;
  long eval_every = 250;
  long eval_batches = 8;
  std::string checkpoint;
  long checkpoint_every = 100;
  std::string resume;
  bool autoresume = false;
  std::string init_from;
  long stop_at_step = 0;  // 0: none
  double stop_after_minutes = 0;
  std::string data = "/usr/share/games/fortunes";
  std::uint64_t seed = 1;
  std::string json;
  std::string log;
  long sample_bytes = 200;
  std::string prompt;  // "": the validation text's first 16 bytes
  sw::model::sampling sampling;
  bool eval_only = false;
  long fail_at_step = 0;  // a fault to rehearse recovery with: rank fail_rank throws in that step
  int fail_rank = 0;
};

// The optimizers --optimizer names, each with its peak rate when --lr is not given: the best of a
// 300-step sweep of this example's defaults (docs/training.md). LARS's and SGD's are large as their
// steps are small: LARS scales each tensor's by its trust coefficient η ‖w‖ / ‖g‖ (η = 0.001), SGD's
// are the clipped gradient.
template <class Optimizer>
struct optimizer_choice {
  using type = Optimizer;
  std::string_view name;
  float default_learning_rate;
};
constexpr std::tuple optimizer_choices{
    optimizer_choice<sw::optim::adamw>{"adamw", 3e-3f}, optimizer_choice<sw::optim::lamb>{"lamb", 1e-2f},
    optimizer_choice<sw::optim::lars>{"lars", 10.0f}, optimizer_choice<sw::optim::sgd>{"sgd", 0.2f}};

constexpr auto optimizer_names =
    std::apply([](const auto&... choice) { return std::array<std::string_view, sizeof...(choice)>{choice.name...}; },
               optimizer_choices);

// Calls `with(choice)` with the choice that `name`, one of optimizer_names, names.
template <class With>
void with_optimizer_named(std::string_view name, const With& with) {
  std::apply([&](const auto&... choice) { ((choice.name == name ? with(choice) : void()), ...); }, optimizer_choices);
}

float default_learning_rate(std::string_view optimizer) {
  float rate = 0;
  with_optimizer_named(optimizer, [&](const auto& choice) { rate = choice.default_learning_rate; });
  return rate;
}

// "adamw|lamb|lars|sgd" for --help's list of names, and "adamw 0.003, lamb 0.01, lars 10, sgd 0.2" for its rates
std::string optimizer_names_text() {
  std::string text;
  for (const std::string_view name : optimizer_names) text += (text.empty() ? "" : "|") + std::string(name);
  return text;
}
std::string default_learning_rates_text() {
  std::string text;
  for (const std::string_view name : optimizer_names)
    text +=
        (text.empty() ? "" : ", ") + std::string(name) + " " + sw::examples::number_text(default_learning_rate(name));
  return text;
}

const std::string options_text =
    "options: --backend threads|mpi  --dp N  --tp 1d:P|2d:RxC|3d:PxQxR  --sequence-parallel\n"
    "         --collective ring|unfused|automatic\n"
    "         --layers N  --hidden N  --heads N  --context N  --steps N  --batch N  --micro-batches N\n"
    "         --recompute none|attention|block  --precision float|bf16\n"
    "         --optimizer " +
    optimizer_names_text() +
    "  --replicated  --lr X\n"
    "         --warmup N  --weight-decay X  --clip X  --eval-every N  --eval-batches N\n"
    "         --checkpoint DIR  --checkpoint-every N  --resume DIR  --autoresume  --init-from DIR\n"
    "         --stop-at-step N  --stop-after-minutes M\n"
    "         --data PATH  --seed N  --json FILE  --log FILE  --eval-only\n"
    "         --sample N  --prompt TEXT  --temperature X  --top-k N\n"
    "         --fail-at-step N  --fail-rank R\n"
    "         --help (-h)\n"
    "(docs/training.md says what each does; without --lr, the optimizer's own: " +
    default_learning_rates_text() + ")\n";

const sw::examples::command_line command_line{"07_train_gpt", options_text.c_str()};

[[noreturn]] void usage(const std::string& problem) { command_line.refuse(problem); }

// "2d:2x4" -> {2, 4}: the grid of --tp, checked
std::vector<int> tensor_parallel_shape(const std::string& spec) {
  const auto colon = spec.find(':');
  const std::string family = spec.substr(0, colon);
  if (colon == std::string::npos || (family != "1d" && family != "2d" && family != "3d"))
    usage("--tp is 1d:P, 2d:RxC or 3d:PxQxR, not " + spec);
  std::vector<int> shape;
  std::size_t at = colon + 1;
  while (at <= spec.size()) {
    const auto x = std::min(spec.find('x', at), spec.size());
    try {
      shape.push_back(std::stoi(spec.substr(at, x - at)));
    } catch (const std::exception&) {
      usage("--tp " + spec + ": extents are whole numbers");
    }
    if (shape.back() < 1) usage("--tp " + spec + ": extents are positive");
    at = x + 1;
  }
  if (shape.size() != static_cast<std::size_t>(family[0] - '0'))
    usage("--tp " + spec + ": a " + family + " grid has " + family.substr(0, 1) + " extents");
  if (shape.size() == 2 && shape[0] != shape[1])
    usage("SUMMA runs on a square grid: --tp " + spec + " has sides " + std::to_string(shape[0]) + " and " +
          std::to_string(shape[1]));
  if (shape.size() == 3 && shape[1] != shape[2])
    usage("the 3-D cube keeps its vectors on the diagonal of its y and z axes, which needs Q = R: --tp " + spec);
  return shape;
}

// How many blocks the family's activation layouts cut the rows (whole samples) into: 1 in 1-D, the
// grid's rows in 2-D, P x Q in 3-D (nn/family.hpp).
int row_blocks(const std::vector<int>& grid) {
  return grid.size() == 1 ? 1 : grid.size() == 2 ? grid[0] : grid[0] * grid[1];
}
// How many blocks the layout of Q, K and V cuts the columns (the heads) into: the grid's last extent,
// P in 1-D, its columns in 2-D, R (= Q) in 3-D (ops/attention.hpp).
int column_blocks(const std::vector<int>& grid) { return grid.back(); }

// How the banner names the tensor-parallel grid's sequence parallelism and its collective products.
const char* sequence_parallelism(bool on, sw::collective_matmul_form collective) {
  if (!on) return "";
  switch (collective) {
    case sw::collective_matmul_form::ring: return " (sequence-parallel, rings)";
    case sw::collective_matmul_form::unfused: return " (sequence-parallel, unfused)";
    case sw::collective_matmul_form::automatic: return " (sequence-parallel, rings or unfused as measured)";
  }
  return "";
}

// --collective's values, in collective_matmul_form's order.
constexpr std::array<std::string_view, 3> collective_forms{"ring", "unfused", "automatic"};

// The model's sizes, each by the option that gives it and the key a checkpoint records it by. A resumed
// run takes them from its checkpoint, as nanoGPT's resume does; one given otherwise is refused, --heads
// above all, which no parameter's shape shows.
auto model_sizes(auto& o) {
  return std::tuple{
      std::pair{std::string_view("layers"), &o.model.layers}, std::pair{std::string_view("hidden"), &o.model.hidden},
      std::pair{std::string_view("heads"), &o.model.heads}, std::pair{std::string_view("context"), &o.model.context}};
}

options parse(int argc, char** argv) {
  options o;
  using sw::examples::read_into, sw::examples::read_named, sw::examples::read_non_negative_into,
      sw::examples::read_one_of, sw::examples::read_positive_into;
  const auto given = command_line.read(argc, argv,
                                       {
                                           {"--backend", read_one_of(o.backend, {"threads", "mpi"})},
                                           {"--dp", read_positive_into(o.data_parallel)},
                                           {"--tp", read_into(o.tensor_parallel)},
                                           {"--layers", read_positive_into(o.model.layers)},
                                           {"--hidden", read_positive_into(o.model.hidden)},
                                           {"--heads", read_positive_into(o.model.heads)},
                                           {"--context", read_positive_into(o.model.context)},
                                           {"--steps", read_positive_into(o.steps)},
                                           {"--batch", read_positive_into(o.batch)},
                                           {"--micro-batches", read_positive_into(o.micro_batches)},
                                           {"--collective", read_named(o.model.products.collective, collective_forms)},
                                           {"--recompute", read_named(o.model.recompute, sw::nn::recomputation_names)},
                                           {"--precision", read_one_of(o.precision, {"float", "bf16"})},
                                           {"--optimizer", read_one_of(o.optimizer, optimizer_names)},
                                           {"--lr", read_positive_into(o.learning_rate)},
                                           {"--warmup", read_non_negative_into(o.warmup)},
                                           {"--weight-decay", read_non_negative_into(o.weight_decay)},
                                           {"--clip", read_non_negative_into(o.clip_norm)},
                                           {"--eval-every", read_positive_into(o.eval_every)},
                                           {"--eval-batches", read_positive_into(o.eval_batches)},
                                           {"--checkpoint", read_into(o.checkpoint)},
                                           {"--checkpoint-every", read_positive_into(o.checkpoint_every)},
                                           {"--resume", read_into(o.resume)},
                                           {"--init-from", read_into(o.init_from)},
                                           {"--stop-at-step", read_positive_into(o.stop_at_step)},
                                           {"--stop-after-minutes", read_positive_into(o.stop_after_minutes)},
                                           {"--data", read_into(o.data)},
                                           {"--seed", read_into(o.seed)},
                                           {"--json", read_into(o.json)},
                                           {"--log", read_into(o.log)},
                                           {"--sample", read_non_negative_into(o.sample_bytes)},
                                           {"--prompt", read_into(o.prompt)},
                                           {"--temperature", read_non_negative_into(o.sampling.temperature)},
                                           {"--top-k", read_non_negative_into(o.sampling.top_k)},
                                           {"--fail-at-step", read_non_negative_into(o.fail_at_step)},
                                           {"--fail-rank", read_non_negative_into(o.fail_rank)},
                                       },
                                       {{"--replicated", &o.replicated},
                                        {"--sequence-parallel", &o.sequence_parallel},
                                        {"--autoresume", &o.autoresume},
                                        {"--eval-only", &o.eval_only}});
  o.model.seed = o.seed;
  if (o.learning_rate == 0) o.learning_rate = default_learning_rate(o.optimizer);
  const auto resume = sw::examples::resuming(o);
  if (const std::string mistake = resume.mistake(); !mistake.empty()) usage(mistake);
  resume.take_recorded_sizes(model_sizes(o), given, usage);
  if (given.contains("--prompt") && o.prompt.empty()) usage("--prompt is the text a sample goes on from: give some");
  for (const std::string_view drawing : {"--prompt", "--temperature", "--top-k"})
    if (given.contains(drawing) && o.sample_bytes == 0)
      usage(std::string(drawing) + " is for the sample, and --sample 0 draws none");
  if (given.contains("--top-k") && o.sampling.temperature == 0)
    usage("--top-k " + std::to_string(o.sampling.top_k) +
          " draws among the likeliest bytes, and --temperature 0 takes the likeliest: give one");
  if (o.batch % (o.data_parallel * o.micro_batches) != 0)
    usage("the batch of " + std::to_string(o.batch) + " samples does not split into " +
          std::to_string(o.data_parallel) + " replicas x " + std::to_string(o.micro_batches) +
          " micro-batches of equal size");
  const long micro_batch = o.batch / (o.data_parallel * o.micro_batches);
  o.grid = tensor_parallel_shape(o.tensor_parallel);
  if (o.sequence_parallel && o.grid.size() != 1)
    usage("--sequence-parallel cuts the tokens of 1-D tensor parallelism; --tp " + o.tensor_parallel +
          " cuts them already");
  if (!o.sequence_parallel && o.model.products.collective != sw::collective_matmul_form::ring)
    usage("--collective chooses the form of sequence parallelism's collective products; add --sequence-parallel");
  if (o.model.hidden % o.model.heads != 0)
    usage("--hidden " + std::to_string(o.model.hidden) + " does not split into " + std::to_string(o.model.heads) +
          " heads of one width");
  if (const int cut = column_blocks(o.grid); o.model.heads % cut != 0)
    usage("--heads " + std::to_string(o.model.heads) + " do not split over the " + std::to_string(cut) +
          " ranks that --tp " + o.tensor_parallel + " cuts the columns over: each rank holds whole heads");
  if (const int blocks = row_blocks(o.grid); micro_batch % blocks != 0)
    usage("a micro-batch of " + std::to_string(micro_batch) + " samples does not split into the " +
          std::to_string(blocks) + " row blocks of whole samples that --tp " + o.tensor_parallel + " cuts it into");
  return o;
}

// ---- what the run reports

// "2500 steps, warm-up 30, peak 0.003": the learning-rate schedule, as a checkpoint records it.
std::string schedule_text(const options& o) {
  return std::to_string(o.steps) + " steps, warm-up " + std::to_string(o.warmup) + ", peak " +
         sw::examples::number_text(o.learning_rate);
}

// ---- training

template <class Optimizer>
Optimizer hyper_parameters(const options& o) {
  if constexpr (std::is_same_v<Optimizer, sw::optim::adamw>)
    return {.beta1 = 0.9f, .beta2 = 0.95f, .epsilon = 1e-8f, .weight_decay = o.weight_decay};
  else if constexpr (std::is_same_v<Optimizer, sw::optim::lamb>)
    return {.beta1 = 0.9f, .beta2 = 0.95f, .epsilon = 1e-6f, .weight_decay = o.weight_decay};
  else
    return {.weight_decay = o.weight_decay};
}

// Weight decay on the matrices of the linear layers only: not on embeddings, biases or norms.
bool decays(const std::string& name) {
  return name.starts_with("blocks.") && name.ends_with(".weight") && name.find("norm") == std::string::npos;
}

template <class Weight, class Family, class Optimizer, sw::optim::weight_update Mode, class Communicator>
void train(Communicator& world, const options& o) {
  const auto started = std::chrono::steady_clock::now();  // of --stop-after-minutes
  const bool speaks = world.rank() == 0;
  const auto say = [&](auto... args) {
    if (speaks) std::printf(args...);
    if (speaks) std::fflush(stdout);
  };

  // Where the run goes on from; a checkpoint that leaves nothing to train ends it before a model is built.
  const sw::examples::resume_request resume = sw::examples::resuming(o);
  const std::string folder = resume.folder(world);
  if (const auto done = resume.finished(world.world_rank(), "07_train_gpt", folder, o.steps)) {
    say("%s", done->c_str());
    return;
  }

  // 1. The mesh: a data axis beside the tensor-parallel grid. The model lives on the grid; the data
  //    axis belongs to the update (it averages the replicas' gradients) and to the loader.
  constexpr std::size_t tensor_dimensions = Family::mesh_dimensions;
  sw::coordinates<tensor_dimensions> shape{};
  std::copy(o.grid.begin(), o.grid.end(), shape.begin());
  sw::data_parallel_mesh mesh(world, o.data_parallel, shape);
  auto& data = mesh.data();
  auto& tensor_parallel = mesh.tensor_parallel();

  // 2. The data: bytes of the corpus, the last tenth held out; each replica reads its own samples.
  const sw::data::byte_corpus corpus(o.data, 0.1, world.world_rank());
  const long replica_batch = o.batch / o.data_parallel;
  const long micro_batch = replica_batch / o.micro_batches;

  // 3. The model, the same on every mesh for one seed. In bf16 it stores its weights and activations
  //    as bf16.
  sw::model::gpt<Weight, Family, std::remove_cvref_t<decltype(tensor_parallel)>> model(tensor_parallel, o.model);

  // What the run says of itself: the model and the mesh, then the corpus (and, where it trains, the
  // GEMM peak its MFU divides by).
  const auto print_headline = [&](double peak) {
    const std::string precision = !std::is_same_v<Weight, sw::bf16> ? "float32"
                                  : o.eval_only                     ? "bf16"
                                                                    : "bf16 over float32 master weights";
    const std::string updated =
        o.eval_only ? "evaluated, no update" : (o.replicated ? "replicated " : "sharded ") + o.optimizer + " update";
    say("shardwise 07: GPT of %.2fM parameters (%s)\non %d rank%s (%s): data %d x tensor-parallel %s%s, %s, %s%s%s\n",
        sw::model::parameter_count(o.model) / 1e6, sw::model::describe(o.model).c_str(), world.size(),
        world.size() == 1 ? "" : "s", o.backend.c_str(), o.data_parallel, o.tensor_parallel.c_str(),
        sequence_parallelism(o.sequence_parallel, o.model.products.collective), precision.c_str(), updated.c_str(),
        o.model.recompute == sw::nn::recomputation::none ? "" : ", ",
        std::string(sw::nn::describe(o.model.recompute)).c_str());
    std::array<char, 64> peak_text{};  // none where the run only evaluates
    if (peak > 0)
      std::snprintf(peak_text.data(), peak_text.size(), "; GEMM peak %.1f GFLOP/s on the cores in use", peak / 1e9);
    say("corpus %s: %zu bytes for training, %zu for validation%s\n", o.data.c_str(), corpus.training().size(),
        corpus.validation().size(), peak_text.data());
  };
  // "(saved on data 2 x 1d:2 in float)": the mesh and precision a checkpoint records.
  const auto saved_on = [](const std::map<std::string, std::string>& saved) {
    const auto saved_as = [&](const std::string& key) { return saved.contains(key) ? saved.at(key) : "?"; };
    const std::string precision = saved.contains("precision") ? " in " + saved.at("precision") : "";
    return "(saved on data " + saved_as("data_parallel") + " x " + saved_as("tensor_parallel") + precision + ")";
  };

  // Memory: the most a rank has held of tensors, parameters, optimizer state and the operations'
  // buffers, as every backend counts it; the largest rank's, in MiB.
  const auto memory_mib = [&] { return static_cast<double>(sw::largest_memory_high_water(world)) / (1 << 20); };

  // The validation loss: the same held-out samples every time, split over the replicas; under
  // no_grad the layers keep nothing for a backward.
  const auto validation_loss = [&] {
    const sw::nn::no_grad evaluating;
    double sum = 0;
    for (long b = 0; b < o.eval_batches; ++b) {
      const auto batch = corpus.validation_batch(b, data.rank(), o.data_parallel, replica_batch, o.model.context);
      sum += model.forward(batch.tokens, batch.targets);
    }
    data.all_reduce(std::span<double>(&sum, 1));
    return sum / static_cast<double>(o.eval_batches * o.data_parallel);
  };

  // A few lines from the model, after --prompt or the validation text's start, drawn as --temperature
  // and --top-k say: each tensor-parallel group samples together, the same bytes on every rank of it.
  const auto print_sample = [&] {
    if (o.sample_bytes == 0) return;
    const auto* prompt_bytes = reinterpret_cast<const std::uint8_t*>(o.prompt.data());
    const auto prompt =
        o.prompt.empty() ? corpus.validation().first(16) : std::span<const std::uint8_t>(prompt_bytes, o.prompt.size());
    const auto text = sw::model::sample(model, prompt, o.sample_bytes, o.seed, o.sampling);
    std::string drawn;
    if (o.sampling.temperature == 0) drawn = ", the likeliest byte each time";
    else if (o.sampling.temperature != 1)
      drawn = ", at temperature " + sw::examples::number_text(o.sampling.temperature);
    if (o.sampling.temperature != 0 && o.sampling.top_k > 0)
      drawn += ", among the " + std::to_string(o.sampling.top_k) + " likeliest bytes";
    say("\n--- sampled after \"%s\"%s\n%s\n---\n", sw::data::printable(prompt).c_str(), drawn.c_str(),
        sw::data::printable(text).c_str());
  };

  // A checkpoint's weights alone, into the model (no update, no optimizer state); returns its step.
  const auto load_weights = [&](const std::string& from, const char* then) {
    const auto saved = sw::optim::load_model_weights(from, model, world);
    say("loaded the weights of %s at step %s %s%s\n", from.c_str(), saved.at("steps").c_str(), saved_on(saved).c_str(),
        then);
    return saved.at("steps");
  };

  // --eval-only: the checkpoint's weights, its validation loss and a sample, as nanoGPT's eval_only and
  // sample.py.
  if (o.eval_only) {
    const std::string step = load_weights(folder, "");
    print_headline(0);
    const double loss = validation_loss();
    say("evaluated step %s: validation loss %.4f nats per byte, on %ld batch%s of %ld samples; memory %.1f MiB\n",
        step.c_str(), loss, o.eval_batches, o.eval_batches == 1 ? "" : "es", replica_batch * o.data_parallel,
        memory_mib());
    if (speaks && !o.json.empty()) {
      std::ofstream out(o.json);
      out.precision(17);
      out << "{\"steps_done\": " << step << ", \"final_val_loss\": " << loss << "}\n";
    }
    print_sample();
    return;
  }

  // --init-from: a new run from a checkpoint's weights, with a fresh optimizer (of any kind) from step 1.
  // They are loaded before the update is built, which takes the model's values as its weights.
  if (folder.empty() && !o.init_from.empty()) (void)load_weights(o.init_from, ": this run trains them from step 1");

  // Its update: sharded across the replicas unless --replicated, one copy of the weights per rank (the
  // update holds the parameters' storage). In bf16 the update keeps float32 master weights; gradients
  // and optimizer state are float32 in either precision.
  sw::optim::data_parallel_update<Optimizer, Mode, Weight> update(model, data, hyper_parameters<Optimizer>(o));
  if constexpr (requires { Optimizer{}.weight_decay; }) {
    auto no_decay = hyper_parameters<Optimizer>(o);
    no_decay.weight_decay = 0;
    for (std::size_t t = 0; t < update.parameters().size(); ++t)
      if (!decays(update.parameters()[t].name)) update.set_optimizer(t, no_decay);
  }
  const sw::optim::warmup_cosine schedule{o.learning_rate, o.warmup, o.steps, o.learning_rate / 10};
  const std::string schedule_described = schedule_text(o);  // as checkpoints record it

  long first_step = 1;
  if (folder.empty()) {
    say("%s", resume.fresh_start_note().c_str());
  } else {
    const auto saved = sw::optim::load_model_checkpoint(folder, update, world);
    first_step = update.steps_done() + 1;
    say("resumed from %s at step %ld %s\n", folder.c_str(), update.steps_done(), saved_on(saved).c_str());
    // A run extended with more --steps follows its own schedule from here, as nanoGPT's would: said,
    // since the learning rate then jumps.
    if (saved.contains("schedule") && saved.at("schedule") != schedule_described)
      say("note: the checkpoint's learning-rate schedule was %s; this run's, %s, takes over from step %ld\n",
          saved.at("schedule").c_str(), schedule_described.c_str(), first_step);
    // AdamW and LAMB keep the same moments, so either goes on from the other's; the library refuses
    // a state of other names.
    if (saved.contains("optimizer") && saved.at("optimizer") != o.optimizer)
      say("note: the checkpoint was trained with %s; this run's %s takes over its optimizer state\n",
          saved.at("optimizer").c_str(), o.optimizer.c_str());
    if (saved.contains("seed") && saved.at("seed") != std::to_string(o.seed))
      say("note: the checkpoint was trained on the samples of --seed %s; this run reads those of --seed %llu\n",
          saved.at("seed").c_str(), static_cast<unsigned long long>(o.seed));
  }

  // MFU's denominator: one core's GEMM rate, measured by rank 0 while the others wait, times the cores
  // the ranks can use.
  double peak = world.rank() == 0 ? sw::measured_gemm_flops() : 0.0;
  world.broadcast(std::span<double>(&peak, 1), 0);
  peak *= std::min<int>(world.size(), static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  print_headline(peak);
  const double tokens_per_step = static_cast<double>(o.batch * o.model.context);

  // 4. The loop: micro-batches add their gradients, the update averages them over the replicas,
  //    clips their global norm and steps.
  sw::examples::loss_curve validation_curve, training_curve;
  double train_loss = 0, val_loss = 0, training_seconds = 0;
  long tokens_trained = 0;
  bool stopped_early = false;

  // What the loop prints and saves, written apart so that the loop reads as the training it is.
  sw::examples::early_stop stop{o.steps, o.stop_at_step, o.stop_after_minutes, started};
  if (const std::string mistake = stop.mistake(first_step); !mistake.empty())
    throw sw::argument_error(world.world_rank(), "07_train_gpt", mistake);
  sw::examples::rate_since_last_line tokens_per_second_now;
  const auto print_progress = [&](long step, double gradient_norm, bool evaluated) {
    const double tokens_per_second = tokens_per_second_now(static_cast<double>(tokens_trained), training_seconds);
    const double mfu = tokens_per_second * sw::model::training_flops_per_token(o.model) / peak;
    const double seconds_left = stop.seconds_left(step, training_seconds / static_cast<double>(step - first_step + 1));
    char validation[32] = "            ";  // as wide as the figure, so the columns stay put
    if (evaluated) std::snprintf(validation, sizeof validation, "  val %.4f", val_loss);
    say("step %5ld/%ld  loss %.4f%s  grad norm %.3f  lr %.2e  %7.0f tokens/s  MFU %4.1f%%  memory %.1f MiB  left %s\n",
        step, o.steps, train_loss, validation, gradient_norm, schedule(step), tokens_per_second, 100 * mfu,
        memory_mib(), sw::examples::duration(seconds_left).c_str());
  };
  std::map<std::string, std::string> metadata{
      {"data_parallel", std::to_string(o.data_parallel)},
      {"tensor_parallel", o.tensor_parallel + (o.sequence_parallel ? " sequence-parallel" : "")},
      {"precision", o.precision},
      {"optimizer", o.optimizer},
      {"seed", std::to_string(o.seed)},
      {"schedule", schedule_described}};
  sw::examples::record_sizes(model_sizes(o), metadata);
  const auto save = [&](long step) {
    sw::optim::save_model_checkpoint(o.checkpoint, update, data, world, metadata);
    say("saved step %ld in %s\n", step, o.checkpoint.c_str());
  };

  // Rank 0's: the steps before first_step are the checkpoint's.
  auto log = speaks && !o.log.empty() ? sw::examples::metrics_log(o.log, first_step - 1) : sw::examples::metrics_log();
  if (!log.note().empty()) say("%s\n", log.note().c_str());
  for (long step = first_step; step <= o.steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    double loss = 0;
    for (long m = 0; m < o.micro_batches; ++m) {
      const auto batch = corpus.training_batch(step, data.rank() * o.micro_batches + m,
                                               o.data_parallel * o.micro_batches, micro_batch, o.model.context, o.seed);
      loss += model.forward(batch.tokens, batch.targets) / static_cast<double>(o.micro_batches);
      model.backward(Weight(1.0f / static_cast<float>(o.micro_batches)));
    }
    // The others are in the update's collectives by now: they must stop too, not wait for this rank.
    if (step == o.fail_at_step && world.world_rank() == o.fail_rank)
      throw std::runtime_error("a failure injected at step " + std::to_string(step) + " (--fail-at-step)");
    const auto report = update.step(data, tensor_parallel.world(), {schedule(step), o.clip_norm});
    data.all_reduce(std::span<double>(&loss, 1));
    train_loss = loss / o.data_parallel;
    const double step_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    training_seconds += step_seconds;
    tokens_trained += static_cast<long>(tokens_per_step);
    training_curve.push_back({static_cast<double>(step), static_cast<double>(step) * tokens_per_step, train_loss});

    stopped_early = stop.after(world, step);  // Ctrl-C on any process, or as planned
    const bool last = step == o.steps || stopped_early;
    const bool evaluates = step % o.eval_every == 0 || last;
    if (evaluates) {
      val_loss = validation_loss();
      validation_curve.push_back({static_cast<double>(step), static_cast<double>(step) * tokens_per_step, val_loss});
    }
    log.write(step, {{"tokens", static_cast<double>(step) * tokens_per_step},
                     {"loss", train_loss},
                     {"val_loss", evaluates ? val_loss : std::numeric_limits<double>::quiet_NaN()},
                     {"grad_norm", report.gradient_norm},
                     {"lr", schedule(step)},
                     {"seconds", step_seconds}});
    if (evaluates || step == first_step || step % 10 == 0) print_progress(step, report.gradient_norm, evaluates);
    if (!o.checkpoint.empty() && (step % o.checkpoint_every == 0 || last)) save(step);
    if (stopped_early) {
      say("%s%s\n", stop.reason().c_str(), resume.where_a_stopped_run_goes_on().c_str());
      break;
    }
  }

  // 5. A few lines from the model.
  if (!stopped_early) print_sample();

  const double tokens_per_second = static_cast<double>(tokens_trained) / training_seconds;
  const double mib = memory_mib();
  say("final: train loss %.4f, validation loss %.4f nats per byte, %.0f tokens/s, MFU %.1f%%, memory %.1f MiB\n",
      train_loss, val_loss, tokens_per_second,
      100 * tokens_per_second * sw::model::training_flops_per_token(o.model) / peak, mib);
  if (speaks && !o.json.empty()) {
    std::ofstream out(o.json);
    out.precision(17);  // the losses to the last bit: a resumed run is compared with an uninterrupted one
    out << "{\"params\": " << sw::model::parameter_count(o.model) << ", \"precision\": \"" << o.precision
        << "\", \"steps\": " << o.steps << ", \"steps_done\": " << update.steps_done()
        << ", \"tokens\": " << tokens_trained << ", \"tokens_per_s\": " << tokens_per_second
        << ", \"mfu\": " << tokens_per_second * sw::model::training_flops_per_token(o.model) / peak
        << ", \"final_train_loss\": " << train_loss << ", \"final_val_loss\": " << val_loss
        << ", \"memory_mib\": " << mib;
    sw::examples::write_curve(out, "val_curve", validation_curve);
    sw::examples::write_curve(out, "train_curve", training_curve);
    out << ", \"wall_s\": " << training_seconds << "}\n";
  }
}

int ranks_needed(const options& o) {
  int ranks = o.data_parallel;
  for (const int extent : o.grid) ranks *= extent;
  return ranks;
}

// The precision, the family and the optimizer are types: the options pick one instantiation of train().
template <class Communicator>
void run(Communicator& world, const options& o) {
  if (ranks_needed(o) != world.size())
    throw sw::argument_error(world.world_rank(), "07_train_gpt",
                             "data " + std::to_string(o.data_parallel) + " x tensor-parallel " + o.tensor_parallel +
                                 " needs " + std::to_string(ranks_needed(o)) + " ranks, the run has " +
                                 std::to_string(world.size()));
  if (o.fail_at_step > 0 && o.fail_rank >= world.size())
    throw sw::argument_error(
        world.world_rank(), "07_train_gpt",
        "--fail-rank " + std::to_string(o.fail_rank) + " is not a rank of this run of " + std::to_string(world.size()));
  const auto with_optimizer = [&]<class Family>() {
    const auto with_mode = [&]<class Optimizer>() {
      const auto with_precision = [&]<sw::optim::weight_update Mode>() {
        if (o.precision == "bf16") train<sw::bf16, Family, Optimizer, Mode>(world, o);
        else
          train<float, Family, Optimizer, Mode>(world, o);
      };
      if (o.replicated) with_precision.template operator()<sw::optim::weight_update::replicated>();
      else
        with_precision.template operator()<sw::optim::weight_update::sharded>();
    };
    with_optimizer_named(o.optimizer,
                         [&]<class Choice>(const Choice&) { with_mode.template operator()<typename Choice::type>(); });
  };
  if (o.sequence_parallel) with_optimizer.template operator()<sw::nn::sequence_parallel_1d<sw::padded>>();
  else if (o.grid.size() == 1)
    with_optimizer.template operator()<sw::nn::tensor_parallel_1d<sw::padded>>();
  else if (o.grid.size() == 2)
    with_optimizer.template operator()<sw::nn::tensor_parallel_2d<sw::padded>>();
  else
    with_optimizer.template operator()<sw::nn::tensor_parallel_3d<sw::directions<>, sw::padded>>();
}

}  // namespace

// Under MPI. Compiled from this same file into an object of its own (SHARDWISE_TRAIN_MPI_OBJECT,
// examples/CMakeLists.txt), so that a build compiles the two backends' instantiations of train() on
// two cores at once, each object in about half the time and two thirds of the memory of one.
void train_under_mpi(int argc, char** argv);

#ifdef SHARDWISE_TRAIN_MPI_OBJECT
void train_under_mpi(int argc, char** argv) {
  const options o = parse(argc, argv);
  sw::examples::stop_on_signals();
  sw::mpi::run(argc, argv, [&](sw::communicator auto& world) { run(world, o); });
}
#else
int main(int argc, char** argv) try {
  const options o = parse(argc, argv);  // refuses what it cannot use, an unreadable checkpoint included
  sw::examples::stop_on_signals();
  if (o.backend == "mpi") {
#ifdef SHARDWISE_TRAIN_WITH_MPI
    train_under_mpi(argc, argv);
#else
    usage("this build has no MPI: --backend mpi is not available");
#endif
  } else {
    sw::threads::run(ranks_needed(o), [&](sw::communicator auto& world) { run(world, o); });
  }
  return sw::examples::exit_code_after_signal();
} catch (const std::exception& failure) {
  std::fprintf(stderr, "%s\n", failure.what());
  return 1;
}
#endif
