// Example 09: train a DLRM on click data from a planted model, its embedding tables spread over the
// ranks and everything else data-parallel, with the fused embedding-bag + all-to-all in the forward pass
// and the fused all-to-all + scatter-add in the backward pass (docs/dlrm.md).
//
//   build/examples/09_train_dlrm                          8 ranks as threads
//   mpiexec -n 4 build/examples/09_train_dlrm --backend mpi
//                                                         4 MPI processes (--oversubscribe if needed)
//
// The data: data::dlrm_generator (random dense features, Zipf-distributed lookups, labels drawn from a
// planted model). The model: model::dlrm. The updates: sharded Adam over the replicas for the MLPs
// (optim/sharded.hpp), row-wise Adagrad on the rows each batch touched for the tables
// (optim/sparse_update.hpp). Every --eval-every steps: the held-out loss beside the constant
// predictor's (the click rate's entropy), AUC and accuracy. Every --compare-every steps the step runs
// twice on the same batch, fused and unfused in turns (the same bits either way), and the progress
// lines give the median time of each: the whole step, and the embedding + all-to-all in it.
// --checkpoint DIR saves every --checkpoint-every steps (both updates: the MLPs' weights and Adam
// moments, every table row and its Adagrad accumulator); --resume DIR continues from the latest
// checkpoint there, on any rank count and any --row-wise, the batches going on from its step. Ctrl-C
// stops the ranks after the step they are in, and saves it when --checkpoint is given; --stop-at-step N
// and --stop-after-minutes M stop the run so, as planned (a batch job's time limit), and --autoresume
// goes on from the --checkpoint folder where it holds a checkpoint: one command for every job of a
// chain. --log FILE writes every step's metrics as the run goes, kept across stops and resumes.
// --eval-only gives a --resume'd checkpoint's held-out loss, AUC and accuracy, and trains nothing;
// --init-from DIR trains a checkpoint's weights and tables afresh, with new optimizer state from step 1.
//
// Read top to bottom: options, then train() — the mesh, the data, the model, the updates, the loop.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "early_stop.hpp"
#include "metrics_log.hpp"
#include "options.hpp"
#include "progress.hpp"
#include "resume.hpp"
#include "shardwise/comm/memory_high_water.hpp"
#include "shardwise/comm/threads.hpp"
#include "shardwise/data/dlrm_generator.hpp"
#include "shardwise/mesh/data_parallel_mesh.hpp"
#include "shardwise/model/dlrm.hpp"
#include "shardwise/nn/no_grad.hpp"
#include "shardwise/optim/adam.hpp"
#include "shardwise/optim/model_checkpoint.hpp"
#include "shardwise/optim/rowwise_adagrad.hpp"
#include "shardwise/optim/sharded.hpp"
#include "shardwise/optim/sparse_update.hpp"
#ifdef SHARDWISE_TRAIN_WITH_MPI
#include "shardwise/comm/mpi.hpp"
#endif

namespace sw = shardwise;

namespace {

// ---- options

struct options {
  std::string backend = "threads";
  int ranks = 8;  // threads; under MPI, the processes mpiexec started
  long steps = 400;
  long batch = 512;  // samples per step, over all ranks
  int tables = 8;
  long rows = 20000;  // per table
  int row_wise = 2;   // of the tables, how many are cut by rows over the ranks (the largest share)
  int dimension = 16;
  long dense_features = 13;
  long hidden = 64;
  std::string pooling = "mean";
  long bag_length = 10;  // bags of 1 .. bag_length lookups
  float dense_lr = 3e-3f;
  float sparse_lr = 0.05f;
  long eval_every = 100;
  long eval_batches = 8;
  long compare_every = 10;
  std::string path = "automatic";  // of the steps that train: automatic, fused or unfused
  std::uint64_t seed = 1;
  std::string checkpoint;
  long checkpoint_every = 100;
  std::string resume;
  std::string init_from;
  bool autoresume = false;
  bool eval_only = false;
  long stop_at_step = 0;  // 0: none
  double stop_after_minutes = 0;
  std::string json;
  std::string log;
  long fail_at_step = 0;  // a fault to rehearse recovery with: rank fail_rank throws in that step
  int fail_rank = 0;
};

constexpr const char* options_text =
    "options: --backend threads|mpi  --ranks N  --steps N  --batch N  --tables N  --rows N  --row-wise N\n"
    "         --dimension N  --dense-features N  --hidden N  --pooling sum|mean  --bag-length N\n"
    "         --dense-lr X  --sparse-lr X  --eval-every N  --eval-batches N  --compare-every N\n"
    "         --path automatic|fused|unfused  --seed N  --json FILE  --log FILE  --eval-only\n"
    "         --checkpoint DIR  --checkpoint-every N  --resume DIR  --autoresume  --init-from DIR\n"
    "         --stop-at-step N  --stop-after-minutes M  --fail-at-step N  --fail-rank R\n"
    "         --help (-h)\n"
    "(docs/dlrm.md says what each does)\n";

const sw::examples::command_line command_line{"09_train_dlrm", options_text};

[[noreturn]] void usage(const std::string& problem) { command_line.refuse(problem); }

// The model's sizes, each by the option that gives it and the key a checkpoint records it by. Each shows
// in a parameter's or a table's shape, so a load would refuse another; a resumed run takes them from its
// checkpoint instead, and says which one given otherwise differs.
auto model_sizes(auto& o) {
  return std::tuple{std::pair{std::string_view("tables"), &o.tables}, std::pair{std::string_view("rows"), &o.rows},
                    std::pair{std::string_view("dimension"), &o.dimension},
                    std::pair{std::string_view("dense-features"), &o.dense_features},
                    std::pair{std::string_view("hidden"), &o.hidden}};
}

options parse(int argc, char** argv) {
  options o;
  using sw::examples::read_into, sw::examples::read_non_negative_into, sw::examples::read_one_of,
      sw::examples::read_positive_into;
  const auto given = command_line.read(argc, argv,
                                       {
                                           {"--backend", read_one_of(o.backend, {"threads", "mpi"})},
                                           {"--ranks", read_positive_into(o.ranks)},
                                           {"--steps", read_positive_into(o.steps)},
                                           {"--batch", read_positive_into(o.batch)},
                                           {"--tables", read_positive_into(o.tables)},
                                           {"--rows", read_positive_into(o.rows)},
                                           {"--row-wise", read_into(o.row_wise)},
                                           {"--dimension", read_positive_into(o.dimension)},
                                           {"--dense-features", read_positive_into(o.dense_features)},
                                           {"--hidden", read_positive_into(o.hidden)},
                                           {"--pooling", read_one_of(o.pooling, {"sum", "mean"})},
                                           {"--bag-length", read_positive_into(o.bag_length)},
                                           {"--dense-lr", read_positive_into(o.dense_lr)},
                                           {"--sparse-lr", read_positive_into(o.sparse_lr)},
                                           {"--eval-every", read_positive_into(o.eval_every)},
                                           {"--eval-batches", read_positive_into(o.eval_batches)},
                                           {"--compare-every", read_positive_into(o.compare_every)},
                                           {"--path", read_one_of(o.path, {"automatic", "fused", "unfused"})},
                                           {"--seed", read_into(o.seed)},
                                           {"--checkpoint", read_into(o.checkpoint)},
                                           {"--checkpoint-every", read_positive_into(o.checkpoint_every)},
                                           {"--resume", read_into(o.resume)},
                                           {"--init-from", read_into(o.init_from)},
                                           {"--stop-at-step", read_positive_into(o.stop_at_step)},
                                           {"--stop-after-minutes", read_positive_into(o.stop_after_minutes)},
                                           {"--json", read_into(o.json)},
                                           {"--log", read_into(o.log)},
                                           {"--fail-at-step", read_non_negative_into(o.fail_at_step)},
                                           {"--fail-rank", read_non_negative_into(o.fail_rank)},
                                       },
                                       {{"--autoresume", &o.autoresume}, {"--eval-only", &o.eval_only}});
  const auto resume = sw::examples::resuming(o);
  if (const std::string mistake = resume.mistake(); !mistake.empty()) usage(mistake);
  resume.take_recorded_sizes(model_sizes(o), given, usage);
  if (o.row_wise < 0 || o.row_wise > o.tables)
    usage("--row-wise, how many tables are cut by rows, is between 0 and --tables (" + std::to_string(o.tables) +
          "), not " + std::to_string(o.row_wise) + (given.contains("--row-wise") ? "" : ", its default"));
  if (o.backend == "mpi" && given.contains("--ranks"))
    usage("--ranks is the threads' count; under MPI each process mpiexec -n N starts is a rank");
  return o;
}

sw::fused::path path_of(const std::string& name) {
  return name == "fused"     ? sw::fused::path::fused
         : name == "unfused" ? sw::fused::path::baseline
                             : sw::fused::path::automatic;
}

// ---- what the run reports

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const auto n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// The median of `seconds` in ms.
std::string milliseconds(const std::vector<double>& seconds) {
  std::array<char, 32> text{};
  std::snprintf(text.data(), text.size(), "%.2f", 1e3 * median(seconds));
  return text.data();
}

// The area under the ROC curve: the chance that a random click scores above a random non-click (ties
// count half), from the ranks of the scores.
double area_under_curve(const std::vector<double>& scores, const std::vector<double>& labels) {
  std::vector<std::size_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return scores[a] < scores[b]; });
  double positive_ranks = 0, positives = 0;
  for (std::size_t i = 0; i < order.size();) {
    std::size_t j = i;
    while (j < order.size() && scores[order[j]] == scores[order[i]]) ++j;
    const double rank = (static_cast<double>(i + j) + 1) / 2;  // the tie's mean rank, from 1
    for (std::size_t k = i; k < j; ++k)
      if (labels[order[k]] > 0.5) positive_ranks += rank, positives += 1;
    i = j;
  }
  const double negatives = static_cast<double>(scores.size()) - positives;
  if (positives == 0 || negatives == 0) return 0.5;
  return (positive_ranks - positives * (positives + 1) / 2) / (positives * negatives);
}

struct held_out {
  double loss = 0, constant_predictor_loss = 0, auc = 0, accuracy = 0;
};

// ---- training

template <class Communicator>
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
  if (const auto done = resume.finished(world.world_rank(), "09_train_dlrm", folder, o.steps)) {
    say("%s", done->c_str());
    return;
  }

  // 1. The mesh: every rank a data replica with a tensor-parallel grid of one; the tables are spread
  //    over the data axis.
  sw::data_parallel_mesh mesh(world, world.size(), {1});
  auto& data = mesh.data();
  if (o.fail_at_step > 0 && o.fail_rank >= world.size())
    throw sw::argument_error(
        world.world_rank(), "09_train_dlrm",
        "--fail-rank " + std::to_string(o.fail_rank) + " is not a rank of this run of " + std::to_string(world.size()));

  // 2. The data: the planted model's click data, training and held-out streams.
  sw::data::dlrm_data_config data_config;
  data_config.dense_features = o.dense_features;
  data_config.table_rows.assign(static_cast<std::size_t>(o.tables), o.rows);
  data_config.min_bag_length = 1;
  data_config.max_bag_length = o.bag_length;
  data_config.seed = o.seed;
  const sw::data::dlrm_generator generator(data_config);

  // 3. The model, then (where the run trains) its two updates.
  sw::model::dlrm_config config;
  config.dense_features = o.dense_features;
  config.bottom = {o.hidden, o.dimension};
  config.top = {o.hidden, 1};
  for (int t = 0; t < o.tables; ++t)
    config.tables.push_back(
        {o.rows, o.dimension,
         t < o.row_wise ? sw::fused::table_sharding::row_wise : sw::fused::table_sharding::table_wise});
  config.pooling = o.pooling == "sum" ? sw::fused::pooling::sum : sw::fused::pooling::mean;
  config.seed = o.seed;
  sw::fused::embedding_options embedding_options;
  embedding_options.choice = embedding_options.backward_choice = path_of(o.path);
  sw::model::dlrm<float, Communicator> model(mesh, config, o.batch, embedding_options);
  auto& embedding = model.embedding().fused_operator();

  say("shardwise 09: DLRM on %d rank%s (%s): %d tables of %ld x %d (%d row-wise), %ld dense features, %s pooling, "
      "batch %ld\n",
      world.size(), world.size() == 1 ? "" : "s", o.backend.c_str(), o.tables, o.rows, o.dimension, o.row_wise,
      o.dense_features, o.pooling.c_str(), o.batch);

  // "(saved on 8 ranks with --row-wise 2)": how a checkpoint's tables were spread.
  const auto saved_on = [](const std::map<std::string, std::string>& saved) {
    const auto saved_as = [&](const std::string& key) { return saved.contains(key) ? saved.at(key) : "?"; };
    return "(saved on " + saved_as("ranks") + " ranks with --row-wise " + saved_as("row-wise") + ")";
  };
  // A checkpoint holds both updates, and records the options that shape the data or the steps rather
  // than the model (the model's shapes it checks itself), so that a resume says which it changes. A
  // resumed run reads the batches from the checkpoint's step on: a step's batch depends on its number only.
  const std::map<std::string, std::string> noted_options = {{"seed", std::to_string(o.seed)},
                                                            {"pooling", o.pooling},
                                                            {"bag-length", std::to_string(o.bag_length)},
                                                            {"dense-lr", sw::examples::number_text(o.dense_lr)},
                                                            {"sparse-lr", sw::examples::number_text(o.sparse_lr)}};
  const auto batch_of = [&](sw::data::dlrm_stream stream, long index) {
    return generator.batch<float>(stream, index * o.batch, o.batch, model.first_row(), model.rows(),
                                  model.input_tables());
  };
  // The held-out loss, AUC and accuracy: the same batches every time, every prediction gathered.
  const auto evaluate = [&] {
    const sw::nn::no_grad evaluating;  // nothing kept for a backward
    held_out result;
    std::vector<double> scores, labels;
    for (long b = 0; b < o.eval_batches; ++b) {
      const auto batch = batch_of(sw::data::dlrm_stream::held_out, b);
      result.loss += model.forward(batch) / static_cast<double>(o.eval_batches);
      std::vector<double> mine(static_cast<std::size_t>(2 * o.batch), 0.0);
      for (long s = 0; s < model.rows(); ++s) {
        mine[static_cast<std::size_t>(model.first_row() + s)] = model.probabilities()[static_cast<std::size_t>(s)];
        mine[static_cast<std::size_t>(o.batch + model.first_row() + s)] = batch.labels[static_cast<std::size_t>(s)];
      }
      data.all_reduce(std::span<double>(mine));
      scores.insert(scores.end(), mine.begin(), mine.begin() + o.batch);
      labels.insert(labels.end(), mine.begin() + o.batch, mine.end());
    }
    const double rate = std::accumulate(labels.begin(), labels.end(), 0.0) / static_cast<double>(labels.size());
    result.constant_predictor_loss =
        rate <= 0 || rate >= 1 ? 0 : -(rate * std::log(rate) + (1 - rate) * std::log(1 - rate));
    result.auc = area_under_curve(scores, labels);
    for (std::size_t i = 0; i < scores.size(); ++i) result.accuracy += (scores[i] > 0.5) == (labels[i] > 0.5) ? 1 : 0;
    result.accuracy /= static_cast<double>(scores.size());
    return result;
  };

  // A checkpoint's weights and tables alone, into the model (no update, no optimizer state); returns
  // its step.
  const auto load_weights = [&](const std::string& from, const char* then) {
    const auto saved = sw::optim::load_model_weights(from, model, world);
    say("loaded the weights of %s at step %s %s%s\n", from.c_str(), saved.at("steps").c_str(), saved_on(saved).c_str(),
        then);
    return saved.at("steps");
  };

  // --eval-only: the checkpoint's held-out loss, AUC and accuracy, and no step.
  if (o.eval_only) {
    const std::string step = load_weights(folder, "");
    const held_out result = evaluate();
    say("evaluated step %s: held-out loss %.4f (a constant predictor's %.4f), AUC %.3f, accuracy %.3f, on %ld "
        "batch%s of %ld samples\n",
        step.c_str(), result.loss, result.constant_predictor_loss, result.auc, result.accuracy, o.eval_batches,
        o.eval_batches == 1 ? "" : "es", o.batch);
    if (speaks && !o.json.empty()) {
      std::ofstream out(o.json);
      out.precision(17);
      out << "{\"steps_done\": " << step << ", \"held_out_loss\": " << result.loss
          << ", \"constant_predictor_loss\": " << result.constant_predictor_loss << ", \"auc\": " << result.auc
          << ", \"accuracy\": " << result.accuracy << "}\n";
    }
    return;
  }

  // --init-from: a new run from a checkpoint's weights and tables, with fresh optimizer state from step
  // 1; loaded before the updates are built, which take the model's values.
  if (folder.empty() && !o.init_from.empty()) (void)load_weights(o.init_from, ": this run trains them from step 1");

  // Its two updates: Adam for the dense MLPs, sharded over the replicas; row-wise Adagrad for the rows
  // of the tables a batch touches.
  sw::optim::sharded_update<sw::optim::adam> dense_update(model, data, sw::optim::adam{});
  sw::optim::sparse_update<sw::optim::rowwise_adagrad> table_update(model);

  long first_step = 1;
  if (folder.empty()) {
    say("%s", resume.fresh_start_note().c_str());
  } else {
    const auto saved = sw::optim::load_model_checkpoint(folder, dense_update, table_update, world);
    first_step = dense_update.steps_done() + 1;
    say("resumed from %s at step %ld %s\n", folder.c_str(), dense_update.steps_done(), saved_on(saved).c_str());
    for (const auto& [option, value] : noted_options)
      if (saved.contains(option) && saved.at(option) != value)
        say("note: the checkpoint was trained with --%s %s; this run goes on with %s\n", option.c_str(),
            saved.at(option).c_str(), value.c_str());
  }
  const auto save = [&](long step) {
    auto metadata = noted_options;
    metadata["ranks"] = std::to_string(world.size());
    metadata["row-wise"] = std::to_string(o.row_wise);
    sw::examples::record_sizes(model_sizes(o), metadata);
    sw::optim::save_model_checkpoint(o.checkpoint, dense_update, table_update, data, world, metadata);
    say("saved step %ld in %s\n", step, o.checkpoint.c_str());
  };

  const auto seconds_since = [](std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  // The slowest rank's seconds for f() from a common start.
  const auto slowest = [&](auto&& f) {
    data.barrier();
    const auto start = std::chrono::steady_clock::now();
    f();
    double seconds = seconds_since(start);
    data.all_reduce(std::span<double>(&seconds, 1), sw::op::max);
    return seconds;
  };
  const auto clear_gradients = [&] {
    dense_update.zero_gradients();
    model.for_each_sparse_parameter([](const std::string&, sw::nn::sparse_parameter<float>& p) { p.gradient.clear(); });
  };

  // 4. The loop. Comparison steps run forward and backward fused and unfused in turns on the same
  //    batch (the same gradients either way) before the one update.
  std::vector<double> step_fused, step_unfused, embedding_fused, embedding_unfused;
  // The most a rank has held so far of tables, weights, optimizer state and buffers, as every backend
  // counts it, in MiB (collective: one all-reduce).
  const auto memory_mib = [&] { return static_cast<double>(sw::largest_memory_high_water(world)) / (1 << 20); };
  double training_seconds = 0, trained_samples = 0, loss = 0;
  held_out last;
  sw::examples::loss_curve training_curve, held_out_curve;
  // samples/s counts the steps that only train; the time left, every step's. "--" where none ran (only
  // compared steps since the last line, as at a resumed run's first step when it is one).
  sw::examples::rate_since_last_line samples_per_second_now;
  const auto rate_text = [](double samples_per_second, int width) {
    std::array<char, 32> text{};
    if (samples_per_second > 0) std::snprintf(text.data(), text.size(), "%*.0f", width, samples_per_second);
    else
      std::snprintf(text.data(), text.size(), "%*s", width, "--");
    return std::string(text.data());
  };
  const auto run_start = std::chrono::steady_clock::now();
  // Rank 0's: the steps before first_step are the checkpoint's.
  auto log = speaks && !o.log.empty() ? sw::examples::metrics_log(o.log, first_step - 1) : sw::examples::metrics_log();
  if (!log.note().empty()) say("%s\n", log.note().c_str());
  sw::examples::early_stop stop{o.steps, o.stop_at_step, o.stop_after_minutes, started};
  if (const std::string mistake = stop.mistake(first_step); !mistake.empty())
    throw sw::argument_error(world.world_rank(), "09_train_dlrm", mistake);
  for (long step = first_step; step <= o.steps; ++step) {
    if (step == o.fail_at_step && world.world_rank() == o.fail_rank)
      throw std::runtime_error("a failure injected at step " + std::to_string(step) + " (--fail-at-step)");
    const auto step_start = std::chrono::steady_clock::now();
    const auto batch = batch_of(sw::data::dlrm_stream::training, step);
    double update_seconds = 0;
    const bool compared = step % o.compare_every == 0;
    if (compared) {
      // After the comparison, the paths training takes: the automatic choice's, once it has made it.
      const auto kept = [](bool measuring, bool fuses) {
        return measuring ? sw::fused::path::automatic : fuses ? sw::fused::path::fused : sw::fused::path::baseline;
      };
      const auto forward = kept(embedding.measuring(), embedding.fuses());
      const auto backward = kept(embedding.measuring_backward(), embedding.fuses_backward());
      for (const bool fuse : {step / o.compare_every % 2 == 0, step / o.compare_every % 2 != 0}) {
        const auto way = fuse ? sw::fused::path::fused : sw::fused::path::baseline;
        embedding.choose_paths(way, way);
        clear_gradients();
        const double seconds = slowest([&] {
          loss = model.forward(batch);
          model.backward();
        });
        double in_embedding = model.seconds_in_embedding().forward + model.seconds_in_embedding().backward;
        data.all_reduce(std::span<double>(&in_embedding, 1), sw::op::max);
        (fuse ? step_fused : step_unfused).push_back(seconds);
        (fuse ? embedding_fused : embedding_unfused).push_back(in_embedding);
      }
      embedding.choose_paths(forward, backward);
      update_seconds = slowest([&] {
        (void)dense_update.step(data, mesh.tensor_parallel().world(), {o.dense_lr, 0.0f});
        table_update.step(mesh.tensor_parallel().world(), o.sparse_lr);
      });
      step_fused.back() += update_seconds;
      step_unfused.back() += update_seconds;
    } else {
      const double seconds = slowest([&] {
        loss = model.forward(batch);
        model.backward();
        (void)dense_update.step(data, mesh.tensor_parallel().world(), {o.dense_lr, 0.0f});
        table_update.step(mesh.tensor_parallel().world(), o.sparse_lr);
      });
      training_seconds += seconds;
      trained_samples += static_cast<double>(o.batch);
    }
    const double step_seconds = seconds_since(step_start);
    const auto samples = static_cast<double>(step * o.batch);
    training_curve.push_back({static_cast<double>(step), samples, loss});
    const bool stops = stop.after(world, step);  // Ctrl-C on any process, or as planned
    const bool ends = step == o.steps || stops;
    const bool evaluates = step % o.eval_every == 0 || ends;
    if (evaluates) {
      last = evaluate();
      held_out_curve.push_back({static_cast<double>(step), samples, last.loss});
    }
    const double unevaluated = std::numeric_limits<double>::quiet_NaN();
    log.write(step, {{"samples", samples},
                     {"loss", loss},
                     {"held_out_loss", evaluates ? last.loss : unevaluated},
                     {"auc", evaluates ? last.auc : unevaluated},
                     {"accuracy", evaluates ? last.accuracy : unevaluated},
                     {"compared", compared ? 1.0 : 0.0},  // 1: the step ran both paths, which its seconds hold
                     {"seconds", step_seconds}});
    if (evaluates || step == first_step || step % 20 == 0) {
      const double seconds_left =
          stop.seconds_left(step, seconds_since(run_start) / static_cast<double>(step - first_step + 1));
      say("step %5ld/%ld  loss %.4f  %s samples/s  memory %.1f MiB  left %s\n", step, o.steps, loss,
          rate_text(samples_per_second_now(trained_samples, training_seconds), 8).c_str(), memory_mib(),
          sw::examples::duration(seconds_left).c_str());
    }
    if (evaluates) {
      say("      held-out loss %.4f (a constant predictor's %.4f), AUC %.3f, accuracy %.3f\n", last.loss,
          last.constant_predictor_loss, last.auc, last.accuracy);
      if (!step_fused.empty())
        say("      fused against unfused, medians of %zu steps each: step %s against %s ms, embedding + all-to-all %s "
            "against %s ms\n",
            step_fused.size(), milliseconds(step_fused).c_str(), milliseconds(step_unfused).c_str(),
            milliseconds(embedding_fused).c_str(), milliseconds(embedding_unfused).c_str());
    }
    if (!o.checkpoint.empty() && (step % o.checkpoint_every == 0 || ends)) save(step);
    if (stops) {
      say("%s%s\n", stop.reason().c_str(), resume.where_a_stopped_run_goes_on().c_str());
      break;
    }
  }

  const double samples_per_second = training_seconds > 0 ? trained_samples / training_seconds : 0;
  const double memory = memory_mib();
  std::string compared = "no step compared (--compare-every " + std::to_string(o.compare_every) +
                         " is more than --steps " + std::to_string(o.steps) + ")";
  if (!step_fused.empty()) {
    const double fused_less = 1 - median(step_fused) / median(step_unfused);  // negative where fusing lost
    std::array<char, 160> text{};
    std::snprintf(text.data(), text.size(),
                  "step %s ms fused against %s ms unfused (%.1f%% %s), embedding + all-to-all %s against %s ms",
                  milliseconds(step_fused).c_str(), milliseconds(step_unfused).c_str(), 100 * std::abs(fused_less),
                  fused_less >= 0 ? "less" : "more", milliseconds(embedding_fused).c_str(),
                  milliseconds(embedding_unfused).c_str());
    compared = text.data();
  }
  const double below_constant = 1 - last.loss / last.constant_predictor_loss;
  say("final: held-out loss %.4f, %.0f%% %s the constant predictor's %.4f; AUC %.3f, accuracy %.3f; %s samples/s; "
      "%s; memory %.1f MiB\n",
      last.loss, 100 * std::abs(below_constant), below_constant >= 0 ? "below" : "above", last.constant_predictor_loss,
      last.auc, last.accuracy, rate_text(samples_per_second, 0).c_str(), compared.c_str(), memory);
  if (speaks && !o.json.empty()) {
    std::ofstream out(o.json);
    out.precision(17);
    // What no step measured is null, not 0: every step compared leaves none timed for samples/s.
    const auto measured = [&](const char* name, bool known, double value) {
      out << ", \"" << name << "\": ";
      if (known) out << value;
      else
        out << "null";
    };
    out << "{\"ranks\": " << world.size() << ", \"steps\": " << o.steps
        << ", \"steps_done\": " << dense_update.steps_done() << ", \"batch\": " << o.batch
        << ", \"held_out_loss\": " << last.loss << ", \"constant_predictor_loss\": " << last.constant_predictor_loss
        << ", \"auc\": " << last.auc << ", \"accuracy\": " << last.accuracy;
    measured("samples_per_s", trained_samples > 0, samples_per_second);
    measured("step_ms_fused", !step_fused.empty(), 1e3 * median(step_fused));
    measured("step_ms_unfused", !step_unfused.empty(), 1e3 * median(step_unfused));
    measured("embedding_ms_fused", !embedding_fused.empty(), 1e3 * median(embedding_fused));
    measured("embedding_ms_unfused", !embedding_unfused.empty(), 1e3 * median(embedding_unfused));
    out << ", \"compared_steps\": " << step_fused.size() << ", \"memory_mib\": " << memory;
    sw::examples::write_curve(out, "train_curve", training_curve);
    sw::examples::write_curve(out, "held_out_curve", held_out_curve);
    out << "}\n";
  }
}

}  // namespace

int main(int argc, char** argv) try {
  const options o = parse(argc, argv);  // refuses what it cannot use, an unreadable checkpoint included
  sw::examples::stop_on_signals();
  if (o.backend == "mpi") {
#ifdef SHARDWISE_TRAIN_WITH_MPI
    sw::mpi::run(argc, argv, [&](sw::communicator auto& world) { train(world, o); });
#else
    usage("this build has no MPI: --backend mpi is not available");
#endif
  } else {
    sw::threads::run(o.ranks, [&](sw::communicator auto& world) { train(world, o); });
  }
  return sw::examples::exit_code_after_signal();
} catch (const std::exception& failure) {
  std::fprintf(stderr, "%s\n", failure.what());
  return 1;
}
