// bench/train_gpt: training steps of the main example's GPT (examples/07_train_gpt.cpp: 4 layers,
// hidden 128, 4 heads, context 128, batch 8, sharded AdamW) on threads — one rank, two data-parallel
// replicas, 1-D tensor parallelism over two ranks, without and with sequence parallelism — beside its
// peer in the same run: the same model, data and hyper-parameters in PyTorch (bench/train_gpt_torch.py,
// CPU, as many threads as ranks). On one rank also with the blocks recomputing attention's
// probabilities or all their activations in the backward pass (gpt_config::recompute), beside PyTorch
// with torch.utils.checkpoint round the core of attention (as Megatron's selective recompute) or round
// each block.
//
// Each iteration is `steps` training steps (forward, backward, update) after two untimed ones; the
// counters give tokens/s, MFU against the float GEMM rate measured at start-up per core, and this
// rank's memory: weights, gradients and optimizer state from the update's buffers, and activations
// measured as the heap growth across the model's first forward pass, what it keeps for backward
// (glibc's mallinfo2, over all ranks, divided by them). scripts/bench-train-gpt runs it and prints the table of
// docs/training.md.
#include <benchmark/benchmark.h>
#include <malloc.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "benchmark_main.hpp"
#include "shardwise/comm/threads.hpp"
#include "shardwise/core/block_cache.hpp"
#include "shardwise/data/byte_corpus.hpp"
#include "shardwise/mesh/data_parallel_mesh.hpp"
#include "shardwise/model/gpt.hpp"
#include "shardwise/nn/recomputation.hpp"
#include "shardwise/ops/gemm_rate.hpp"
#include "shardwise/optim/adamw.hpp"
#include "shardwise/optim/sharded.hpp"

namespace {

namespace sw = shardwise;

constexpr long batch = 8;  // the example's default
constexpr long steps = 40;
const char* const corpus_path = "/usr/share/games/fortunes";
const sw::model::gpt_config config{};  // the example's default model

std::size_t heap_bytes() {
  const struct mallinfo2 info = ::mallinfo2();
  return info.uordblks + info.hblkhd;
}

// `replicas` x 1-D `group` ranks as threads.
template <class Family>
void shardwise_steps(benchmark::State& state, int replicas, int group,
                     sw::nn::recomputation recompute = sw::nn::recomputation::none) {
  static const sw::data::byte_corpus corpus(corpus_path);
  static const double peak_per_core = sw::measured_gemm_flops();
  const int ranks = replicas * group;
  for (auto _ : state) {
    double seconds = 0;
    sw::optim::memory_footprint memory;
    std::size_t activations = 0;
    sw::threads::run(ranks, [&](sw::communicator auto& world) {
      sw::data_parallel_mesh mesh(world, replicas, sw::coordinates<1>{group});
      sw::model::gpt_config model_config = config;
      model_config.recompute = recompute;
      sw::model::gpt<float, Family, std::remove_cvref_t<decltype(mesh.tensor_parallel())>> model(mesh.tensor_parallel(),
                                                                                                 model_config);
      sw::optim::sharded_update<sw::optim::adamw> update(model, mesh.data(), {.beta2 = 0.95f, .weight_decay = 0.1f});
      const auto step = [&](long number) {
        const auto b = corpus.training_batch(number, mesh.replica(), replicas, batch / replicas, config.context, 1);
        (void)model.forward(b.tokens, b.targets);
        model.backward();
        (void)update.step(mesh.data(), mesh.tensor_parallel().world(), {1e-3f, 1.0f});
      };
      // Activations: what the model's first forward pass leaves on the heap for backward, per rank.
      // Each rank's cache of freed blocks (core/block_cache.hpp) is emptied first, and what the pass's
      // temporaries leave in it is not counted.
      sw::block_cache::release_this_thread();
      world.barrier();
      const std::size_t before = heap_bytes();
      world.barrier();
      const auto b = corpus.training_batch(1, mesh.replica(), replicas, batch / replicas, config.context, 1);
      (void)model.forward(b.tokens, b.targets);
      std::array<double, 1> cached{static_cast<double>(sw::block_cache::cached_bytes())};
      world.all_reduce(std::span<double>(cached));
      if (world.rank() == 0)
        activations = (heap_bytes() - before - static_cast<std::size_t>(cached[0])) / static_cast<std::size_t>(ranks);
      world.barrier();
      model.backward();
      update.zero_gradients();
      step(2);
      step(3);
      world.barrier();
      const auto start = std::chrono::steady_clock::now();
      for (long s = 0; s < steps; ++s) step(4 + s);
      world.barrier();
      if (world.rank() == 0) {
        seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        memory = update.memory();
      }
    });
    state.SetIterationTime(seconds);
    const double tokens_per_s = static_cast<double>(steps * batch * config.context) / seconds;
    const int cores = std::min<int>(ranks, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
    state.counters["tokens_per_s"] = tokens_per_s;
    state.counters["mfu"] = tokens_per_s * sw::model::training_flops_per_token(config) / (peak_per_core * cores);
    state.counters["weight_bytes"] = static_cast<double>(memory.weight_bytes);
    state.counters["gradient_bytes"] = static_cast<double>(memory.gradient_bytes);
    state.counters["state_bytes"] = static_cast<double>(memory.state_bytes);
    state.counters["activation_bytes"] = static_cast<double>(activations);
  }
}

// The peer: bench/train_gpt_torch.py for the same number of steps, its tokens/s read from its JSON.
void pytorch_steps(benchmark::State& state, int threads,
                   sw::nn::recomputation recompute = sw::nn::recomputation::none) {
  for (auto _ : state) {
    const std::string json = "/tmp/shardwise-bench-train-gpt-torch.json";
    const std::string command = "/usr/bin/python3 " SHARDWISE_SOURCE_DIR "/bench/train_gpt_torch.py --steps " +
                                std::to_string(steps + 2) + " --eval-every 1000 --eval-batches 1 --threads " +
                                std::to_string(threads) + " --recompute " + std::string(sw::nn::name_of(recompute)) +
                                " --json " + json + " > /dev/null";
    if (std::system(command.c_str()) != 0) {
      state.SkipWithError("PyTorch did not run (python3-torch installed?)");
      return;
    }
    // Its steps' times, the first two (untimed here too) left out.
    std::ifstream in(json);
    std::stringstream text;
    text << in.rdbuf();
    const std::string all = text.str();
    std::istringstream times(all.substr(all.find('[', all.find("\"step_seconds\"")) + 1));
    double seconds = 0;
    for (long s = 0; s < steps + 2; ++s) {
      double step_seconds = 0;
      char separator = 0;
      times >> step_seconds >> separator;
      if (s >= 2) seconds += step_seconds;
    }
    if (!times) {
      state.SkipWithError("PyTorch's JSON has no step_seconds for every step");
      return;
    }
    state.SetIterationTime(seconds);
    state.counters["tokens_per_s"] = static_cast<double>(steps * batch * config.context) / seconds;
  }
}

}  // namespace

int main(int argc, char** argv) {
  return shardwise::bench::run_benchmarks(argc, argv, [] {
    using one_d = sw::nn::tensor_parallel_1d<>;
    const auto timed = [](benchmark::internal::Benchmark* b) {
      b->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(1);
    };
    // Each ours beside its peer with as many cores.
    timed(benchmark::RegisterBenchmark("train_gpt/shardwise/1_rank",
                                       [](benchmark::State& s) { shardwise_steps<one_d>(s, 1, 1); }));
    timed(benchmark::RegisterBenchmark("train_gpt/pytorch/1_thread", [](benchmark::State& s) { pytorch_steps(s, 1); }));
    timed(benchmark::RegisterBenchmark("train_gpt/shardwise/data_2",
                                       [](benchmark::State& s) { shardwise_steps<one_d>(s, 2, 1); }));
    timed(benchmark::RegisterBenchmark("train_gpt/shardwise/tensor_1d_2",
                                       [](benchmark::State& s) { shardwise_steps<one_d>(s, 1, 2); }));
    timed(benchmark::RegisterBenchmark("train_gpt/shardwise/sequence_1d_2", [](benchmark::State& s) {
      shardwise_steps<sw::nn::sequence_parallel_1d<>>(s, 1, 2);
    }));
    timed(
        benchmark::RegisterBenchmark("train_gpt/pytorch/2_threads", [](benchmark::State& s) { pytorch_steps(s, 2); }));
    for (const auto recompute : {sw::nn::recomputation::attention, sw::nn::recomputation::block}) {
      const std::string suffix = "_recompute_" + std::string(sw::nn::name_of(recompute));
      timed(benchmark::RegisterBenchmark(
          ("train_gpt/shardwise/1_rank" + suffix).c_str(),
          [recompute](benchmark::State& s) { shardwise_steps<one_d>(s, 1, 1, recompute); }));
      timed(benchmark::RegisterBenchmark(("train_gpt/pytorch/1_thread" + suffix).c_str(),
                                         [recompute](benchmark::State& s) { pytorch_steps(s, 1, recompute); }));
    }
    return true;
  });
}
