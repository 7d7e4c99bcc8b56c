// Example 05: data-parallel training with a sharded Adam update, and resuming on fewer replicas.
//
// Every rank trains the same small MLP (8 → 32 → 1, tanh) on its own synthetic mini-batches. After the
// backward pass the gradients are averaged and the update is sharded: each rank updates 1/N of the
// weights and keeps 1/N of Adam's moments (docs/sharded-update.md). Halfway through, the run saves a
// checkpoint (a step folder, committed whole: docs/reliability.md), and the second half resumes from
// it on one replica fewer: the checkpoint reshards.
//
//   cmake --build build --target 05_sharded_adam && build/examples/05_sharded_adam
//                                                    4 ranks as threads, resuming on 3
//   mpiexec -n 8 build/examples/05_sharded_adam_mpi  8 MPI processes, resuming on 7 (--oversubscribe if needed)
//
// Read top to bottom; the numbered steps are the tutorial.
#include <Eigen/Dense>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "launch.hpp"
#include "shardwise/comm/communicator.hpp"
#include "shardwise/optim/adam.hpp"
#include "shardwise/optim/checkpoint.hpp"
#include "shardwise/optim/schedule.hpp"
#include "shardwise/optim/sharded.hpp"

namespace optim = shardwise::optim;

namespace {

constexpr int inputs = 8;
constexpr int hidden = 32;
constexpr int batch = 64;  // per replica
constexpr long steps = 400;

using matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using row_vector = Eigen::RowVectorXf;

// 1. The model's parameters, as the update sees them: shapes only (rows × cols; a vector is 1 × n).
const std::vector<optim::parameter_shape> shapes = {{hidden, inputs}, {1, hidden}, {1, hidden}, {1, 1}};
enum parameter : std::size_t { w1, b1, w2, b2 };

// The task: y = sin(3 x · a) for a fixed direction a; each replica draws its own batches.
struct batch_data {
  matrix x;
  Eigen::VectorXf y;
};
batch_data draw_batch(int rank, long step) {
  std::mt19937 random(static_cast<unsigned>(std::int64_t{rank} * 100003 + step));
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  batch_data data{matrix(batch, inputs), Eigen::VectorXf(batch)};
  for (int i = 0; i < batch; ++i) {
    float projection = 0.0f;
    for (int k = 0; k < inputs; ++k) {
      data.x(i, k) = uniform(random);
      projection += data.x(i, k) * (k % 2 == 0 ? 0.5f : -0.25f);
    }
    data.y(i) = std::sin(3.0f * projection);
  }
  return data;
}

// 2. Forward and backward by hand (Eigen), reading the full weights from the update and writing this
//    replica's gradients into it. Returns the batch's mean squared error.
float forward_backward(optim::sharded_update<optim::adam>& update, const batch_data& data) {
  const auto view = [&](parameter p) {
    const auto w = update.weights(p);
    return Eigen::Map<const matrix>(w.data(), static_cast<Eigen::Index>(shapes[p].rows),
                                    static_cast<Eigen::Index>(shapes[p].cols));
  };
  const auto gradient = [&](parameter p) {
    return Eigen::Map<matrix>(update.gradients(p).data(), static_cast<Eigen::Index>(shapes[p].rows),
                              static_cast<Eigen::Index>(shapes[p].cols));
  };
  const matrix h = ((data.x * view(w1).transpose()).rowwise() + row_vector(view(b1))).array().tanh().matrix();
  const Eigen::VectorXf prediction = (h * view(w2).transpose()).array() + view(b2)(0, 0);
  const Eigen::VectorXf error = prediction - data.y;

  const Eigen::VectorXf d_prediction = 2.0f * error / static_cast<float>(batch);  // d(mean of squares)
  gradient(w2) = d_prediction.transpose() * h;
  gradient(b2)(0, 0) = d_prediction.sum();
  const matrix d_pre = ((d_prediction * view(w2)).array() * (1.0f - h.array().square())).matrix();
  gradient(w1) = d_pre.transpose() * data.x;
  gradient(b1) = d_pre.colwise().sum();
  return error.squaredNorm() / static_cast<float>(batch);
}

// 3. Training steps [first, last]: forward/backward on this replica's batch, one sharded Adam step.
template <class Comm>
void train(Comm& comm, optim::sharded_update<optim::adam>& update, long first, long last) {
  const optim::warmup_cosine schedule{.peak = 1e-2f, .warmup_steps = 20, .total_steps = steps, .final_rate = 1e-4f};
  for (long step = first; step <= last; ++step) {
    float loss = forward_backward(update, draw_batch(comm.world_rank(), step));
    update.step(comm, schedule(step));
    comm.all_reduce(std::span<float>(&loss, 1));  // the mean over replicas, for printing
    if (comm.rank() == 0 && (step % 50 == 0 || step == first))
      std::printf("[%d replicas] step %4ld/%ld  loss %.5f  lr %.5f\n", comm.size(), step, steps,
                  static_cast<double>(loss / static_cast<float>(comm.size())), static_cast<double>(schedule(step)));
  }
}

}  // namespace

int main(int argc, char** argv) {
  auto body = [](shardwise::communicator auto& world) {
    // 4. The update: Adam's hyper-parameters are a plain value; the initial weights the same on
    //    every replica (here: a fixed seed).
    optim::sharded_update<optim::adam> update(world, shapes, optim::adam{.weight_decay = 1e-4f});
    std::mt19937 random(7);
    std::normal_distribution<float> normal(0.0f, 0.3f);
    for (std::size_t p = 0; p < shapes.size(); ++p) {
      std::vector<float> initial(shapes[p].size());
      for (float& w : initial) w = normal(random);
      update.set_weights(p, initial);
    }
    if (world.rank() == 0) {
      const auto m = update.memory();
      std::printf("%zu parameters on %d replicas: %.2f bytes each on this rank (replicated Adam: 16)\n", m.parameters,
                  world.size(), m.bytes_per_parameter());
    }

    // 5. First half, then a checkpoint: each replica writes its shard and rank 0 the manifest into
    //    step-200.tmp/, renamed step-200/ once complete; then `latest` names it. A save never touches
    //    an earlier one, so a crash at any moment leaves the last complete checkpoint loadable.
    train(world, update, 1, steps / 2);
    const auto directory =
        std::filesystem::temp_directory_path() / ("shardwise-example-05-" + std::to_string(world.size()));
    optim::save_checkpoint(world, update, directory);
    if (world.rank() == 0) std::printf("saved %s\n", (directory / ("step-" + std::to_string(steps / 2))).c_str());

    // 6. Second half on one replica fewer (the last rank leaves): a new update over the smaller
    //    communicator loads the checkpoint `latest` names, resharding Adam's moments from N blocks
    //    into N − 1; at the end it saves step-400/ beside step-200/.
    const int remaining = world.size() > 1 ? world.size() - 1 : 1;
    auto fewer = world.split(world.rank() < remaining ? 0 : 1, world.rank());
    if (world.rank() < remaining) {
      optim::sharded_update<optim::adam> resumed(fewer, shapes, update.optimizer());
      optim::load_checkpoint(fewer, resumed, directory);
      if (fewer.rank() == 0) std::printf("resumed at step %ld on %d replicas\n", resumed.steps_done(), fewer.size());
      train(fewer, resumed, resumed.steps_done() + 1, steps);
      optim::save_checkpoint(fewer, resumed, directory);
      if (fewer.rank() == 0) std::printf("saved %s\n", (directory / ("step-" + std::to_string(steps))).c_str());
    }
    world.barrier();
    if (world.rank() == 0) {
      std::filesystem::remove_all(directory);
      std::printf("removed %s: a tutorial's checkpoints are not kept\n", directory.c_str());
    }
  };

  return shardwise::examples::launch(argc, argv, 4, body);  // as in example 01
}
