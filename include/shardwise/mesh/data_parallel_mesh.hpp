#pragma once
// data_parallel_mesh<Communicator, D>: the mesh of a training run, data replicas beside a D-dimensional
// tensor-parallel grid. Its full mesh has D + 1 axes, the data axis first:
//
//   shardwise::data_parallel_mesh mesh(world, /*replicas*/ 2, {2, 2});   // 8 ranks: data 2 x 2-D 2x2
//   model::gpt<float, nn::tensor_parallel_2d<>, ...> model(mesh.tensor_parallel(), config);
//   optim::sharded_update<optim::adamw> update(model, mesh.data());
//   update.step(mesh.data(), mesh.tensor_parallel().world(), {lr, clip});
//
// Rank order as process_mesh's: rank = data coordinate · (grid size) + rank in the grid, so the ranks of
// one replica are consecutive (one machine's, when the launcher fills machines in order). data() joins
// the ranks that hold the same piece of every parameter in each replica: the update's group.
// tensor_parallel() is a process_mesh over the ranks of this replica (group of every axis but data):
// models and layers live on it, as on any mesh of their family's dimensions.
#include <algorithm>
#include <array>
#include <cstddef>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <utility>

#include "shardwise/core/error.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/mesh/shape.hpp"

namespace shardwise {

template <class Communicator, std::size_t TensorDimensions>
class data_parallel_mesh {
 public:
  using full_mesh_type = process_mesh<Communicator, TensorDimensions + 1>;
  using tensor_parallel_mesh_type = process_mesh<Communicator, TensorDimensions>;

  // Collective over `world`: replicas x (the grid's ranks) must be world.size(), else every rank throws
  // mesh_error naming both.
  data_parallel_mesh(Communicator& world, int replicas, const coordinates<TensorDimensions>& grid)
      : full_(std::make_unique<full_mesh_type>(world, joined(world, replicas, grid))),
        tensor_parallel_(std::make_unique<tensor_parallel_mesh_type>(full_->group(tensor_axes()), grid)) {}

  // The ranks holding the same pieces in every replica, ordered by replica.
  [[nodiscard]] Communicator& data() { return full_->axis(0); }
  // This replica's tensor-parallel grid.
  [[nodiscard]] tensor_parallel_mesh_type& tensor_parallel() noexcept { return *tensor_parallel_; }
  [[nodiscard]] full_mesh_type& full() noexcept { return *full_; }
  [[nodiscard]] int replicas() const noexcept { return full_->shape()[0]; }
  [[nodiscard]] int replica() const noexcept { return full_->coords()[0]; }

 private:
  static coordinates<TensorDimensions + 1> joined(Communicator& world, int replicas,
                                                  const coordinates<TensorDimensions>& grid) {
    coordinates<TensorDimensions + 1> shape{};
    shape[0] = replicas;
    std::copy(grid.begin(), grid.end(), shape.begin() + 1);
    const long long grid_ranks = std::accumulate(grid.begin(), grid.end(), 1LL, std::multiplies<>());
    if (replicas < 1)
      throw mesh_error(world.world_rank(), "data_parallel_mesh",
                       std::to_string(replicas) + " data replicas: a mesh holds at least one replica of its grid");
    if (static_cast<long long>(replicas) * grid_ranks != world.size())
      throw mesh_error(world.world_rank(), "data_parallel_mesh",
                       std::to_string(replicas) + " data replicas of the tensor-parallel grid " + shape_string(grid) +
                           " need " + std::to_string(static_cast<long long>(replicas) * grid_ranks) +
                           " ranks, the communicator has " + std::to_string(world.size()));
    return shape;
  }

  // Every axis but the data axis: 1, ..., D.
  static std::array<int, TensorDimensions> tensor_axes() {
    std::array<int, TensorDimensions> axes{};
    std::iota(axes.begin(), axes.end(), 1);
    return axes;
  }

  // Held by pointer: the tensor-parallel mesh borrows a communicator the full mesh owns, and both must
  // keep their addresses when this object moves.
  std::unique_ptr<full_mesh_type> full_;
  std::unique_ptr<tensor_parallel_mesh_type> tensor_parallel_;
};

template <class Communicator, std::size_t D>
data_parallel_mesh(Communicator&, int, const int (&)[D]) -> data_parallel_mesh<Communicator, D>;
template <class Communicator, std::size_t D>
data_parallel_mesh(Communicator&, int, const coordinates<D>&) -> data_parallel_mesh<Communicator, D>;

}  // namespace shardwise
