#pragma once
// Small checkpoints of both kinds whose every saved value is a formula of (step, seed, tensor,
// variable, global row, column): a save on any backend and any number of ranks writes the same
// values, and a load is checked bit for bit against the formula, with no other run to compare with.
//
//   flat kind:  flat_state — a sharded Adam update of three tensors on a communicator of any size;
//   model kind: model_state — two parameters of a tiny model (a weight whose columns the
//               tensor-parallel group splits, a bias every rank of it holds) on data 2 x 1-D P/2 when
//               the rank count is even, else on data 1 x 1-D P; sharded AdamW; and an embedding table
//               cut by rows over every rank, as a DLRM's row-wise table is, with row-wise Adagrad.
// set(step, seed) puts the state there; save(dir, keep) and load(path) go through the kind's
// checkpoint functions; differences(step, seed) (a collective) says where a loaded state is not that
// one ("" when it is).
#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "shardwise/layout/split.hpp"
#include "shardwise/mesh/data_parallel_mesh.hpp"
#include "shardwise/nn/parameter.hpp"
#include "shardwise/nn/sparse_parameter.hpp"
#include "shardwise/optim/adam.hpp"
#include "shardwise/optim/adamw.hpp"
#include "shardwise/optim/checkpoint.hpp"
#include "shardwise/optim/model_checkpoint.hpp"
#include "shardwise/optim/rowwise_adagrad.hpp"
#include "shardwise/optim/sharded.hpp"
#include "shardwise/optim/sparse_update.hpp"
#include "shardwise/tensor/distribute.hpp"

namespace shardwise::testing {

// Variable 0 is the weight, k + 1 the optimizer's state variable k.
[[nodiscard]] inline float checkpoint_value(long step, int seed, std::size_t tensor, std::size_t variable,
                                            std::int64_t row, std::int64_t col) {
  const auto key = static_cast<std::uint64_t>(step * 7919 + seed * 104729 + static_cast<long>(tensor) * 1299709 +
                                              static_cast<long>(variable) * 15485863 + row * 131 + col * 31);
  return static_cast<float>(static_cast<int>(key % 2003) - 1001) / 1024.0f;
}

// Where `got` is not the formula's value of element (row, col), or "".
[[nodiscard]] inline std::string difference(const std::string& what, float got, float expected, std::int64_t row,
                                            std::int64_t col) {
  if (std::bit_cast<std::uint32_t>(got) == std::bit_cast<std::uint32_t>(expected)) return "";
  return what + " (" + std::to_string(row) + ", " + std::to_string(col) + ") is " + std::to_string(got) + ", not " +
         std::to_string(expected);
}

template <class Communicator>
struct flat_state {
  using update_type = optim::sharded_update<optim::adam>;
  static constexpr const char* kind = "flat";
  static inline const std::vector<optim::parameter_shape> shapes = {{7, 5}, {1, 13}, {3, 11}};

  Communicator& world;
  update_type update;

  explicit flat_state(Communicator& w) : world(w), update(w, shapes) {}

  // The whole of variable v of tensor t as the formula gives it.
  [[nodiscard]] static std::vector<float> whole(long step, int seed, std::size_t t, std::size_t v) {
    std::vector<float> values(shapes[t].size());
    for (std::size_t i = 0; i < values.size(); ++i)
      values[i] = checkpoint_value(step, seed, t, v, static_cast<std::int64_t>(i / shapes[t].cols),
                                   static_cast<std::int64_t>(i % shapes[t].cols));
    return values;
  }

  void set(long step, int seed) {
    for (std::size_t t = 0; t < shapes.size(); ++t) {
      update.set_weights(t, whole(step, seed, t, 0));
      for (std::size_t k = 0; k < optim::adam::state_names.size(); ++k)
        update.set_state(k, t, whole(step, seed, t, k + 1));
    }
    update.set_steps_done(step);
  }

  void save(const std::filesystem::path& directory, int keep = 2) {
    optim::save_checkpoint(world, update, directory, keep);
  }
  void load(const std::filesystem::path& path) { optim::load_checkpoint(world, update, path); }

  // Every rank gathers every variable, whatever it finds, so that the collectives match.
  [[nodiscard]] std::string differences(long step, int seed) {
    std::string found;
    if (update.steps_done() != step)
      found = "steps " + std::to_string(update.steps_done()) + ", not " + std::to_string(step);
    for (std::size_t t = 0; t < shapes.size(); ++t)
      for (std::size_t v = 0; v <= optim::adam::state_names.size(); ++v) {
        const auto weights = update.weights(t);
        const std::vector<float> got =
            v == 0 ? std::vector<float>(weights.begin(), weights.end()) : update.gather_state(world, v - 1, t);
        const auto expected = whole(step, seed, t, v);
        const auto cols = static_cast<std::int64_t>(shapes[t].cols);
        for (std::size_t i = 0; i < got.size() && found.empty(); ++i)
          found = difference("tensor " + std::to_string(t) + " variable " + std::to_string(v), got[i], expected[i],
                             static_cast<std::int64_t>(i) / cols, static_cast<std::int64_t>(i) % cols);
      }
    return found;
  }
};

template <class Mesh>
struct tiny_model {
  nn::parameter<float, row_1d<padded>, Mesh> weight;
  nn::parameter<float, replicated<>, Mesh> bias;

  explicit tiny_model(Mesh& mesh) : weight(mesh, {7, 5}, 0.0f), bias(mesh, {1, 5}, 0.0f) {}

  template <class F>
  void for_each_parameter(F&& f) {
    f("weight", weight);
    f("bias", bias);
  }
};

// A table's piece on this rank, as a sparse update takes it: rows [rows·r/P, rows·(r+1)/P) of 9 x 3.
struct tiny_table {
  static constexpr std::int64_t rows = 9;
  static constexpr int columns = 3;
  nn::sparse_parameter<float> piece;

  tiny_table(int rank, int ranks)
      : piece(0, rows, rows * rank / ranks, rows * (rank + 1) / ranks - rows * rank / ranks, columns) {}

  template <class F>
  void for_each_sparse_parameter(F&& f) {
    f("table", piece);
  }
};

template <class Communicator>
struct model_state {
  using mesh_type = data_parallel_mesh<Communicator, 1>;
  using update_type = optim::sharded_update<optim::adamw>;
  static constexpr const char* kind = "model";

  Communicator& world;
  mesh_type mesh;
  tiny_model<typename mesh_type::tensor_parallel_mesh_type> model;
  update_type update;
  tiny_table table;
  optim::sparse_update<optim::rowwise_adagrad> table_update;

  explicit model_state(Communicator& w)
      : world(w),
        mesh(w, replicas(w.size()), {w.size() / replicas(w.size())}),
        model(mesh.tensor_parallel()),
        update(model, mesh.data()),
        table(w.rank(), w.size()),
        table_update(table) {}

  // The table is tensor 2: variable 0 its values, 1 its rows' accumulator (in column 0).
  static constexpr std::size_t table_tensor = 2;

  static int replicas(int ranks) { return ranks % 2 == 0 ? 2 : 1; }

  void set(long step, int seed) {
    std::size_t t = 0;
    model.for_each_parameter([&](const std::string&, auto& p) {
      using layout = typename std::remove_cvref_t<decltype(p.value)>::layout_type;
      const auto from_formula = [&](std::size_t v) {
        return from_function<layout>(mesh.tensor_parallel(), p.value.extents(), [&](std::int64_t i, std::int64_t j) {
          return checkpoint_value(step, seed, t, v, i, j);
        });
      };
      const auto weights = from_formula(0);
      std::ranges::copy(weights.data(), p.value.data().begin());
      for (std::size_t k = 0; k < optim::adamw::state_names.size(); ++k)
        update.set_state(k, t, from_formula(k + 1).data());
      ++t;
    });
    update.set_steps_done(step);
    auto& piece = table.piece;
    const auto accumulators = table_update.state(0);
    for (std::int64_t i = 0; i < piece.rows(); ++i) {
      for (int j = 0; j < piece.dimension(); ++j)
        piece.value()(i, j) = checkpoint_value(step, seed, table_tensor, 0, piece.first_row + i, j);
      accumulators[static_cast<std::size_t>(i)] = checkpoint_value(step, seed, table_tensor, 1, piece.first_row + i, 0);
    }
  }

  void save(const std::filesystem::path& directory, int keep = 2) {
    optim::save_model_checkpoint(directory, update, table_update, mesh.data(), world, {{"note", "saved by a test"}},
                                 keep);
  }
  void load(const std::filesystem::path& path) {
    (void)optim::load_model_checkpoint(path, update, table_update, world);
  }

  [[nodiscard]] std::string differences(long step, int seed) {
    std::string found;
    if (update.steps_done() != step)
      found = "steps " + std::to_string(update.steps_done()) + ", not " + std::to_string(step);
    std::size_t t = 0;
    model.for_each_parameter([&](const std::string& name, auto& p) {
      for (std::size_t v = 0; v <= optim::adamw::state_names.size(); ++v) {
        auto values = p.value;  // the same layout, its own storage
        if (v > 0) {
          const auto gathered = update.gather_state(mesh.data(), v - 1, t);
          std::ranges::copy(gathered, values.data().begin());
        }
        const auto whole = all_gather(values);
        for (std::int64_t i = 0; i < whole.rows(); ++i)
          for (std::int64_t j = 0; j < whole.cols(); ++j)
            if (found.empty())
              found = difference(name + " variable " + std::to_string(v), whole(i, j),
                                 checkpoint_value(step, seed, t, v, i, j), i, j);
      }
      ++t;
    });
    // The table and its accumulators, whole: each row is on one rank, zeros elsewhere, so the sum is exact.
    const auto& piece = table.piece;
    std::vector<float> values(tiny_table::rows * tiny_table::columns, 0.0f), accumulators(tiny_table::rows, 0.0f);
    for (std::int64_t i = 0; i < piece.rows(); ++i) {
      const auto row = static_cast<std::size_t>(piece.first_row + i);
      std::ranges::copy(piece.value().row(i), values.begin() + static_cast<std::ptrdiff_t>(row * tiny_table::columns));
      accumulators[row] = table_update.state(0)[static_cast<std::size_t>(i)];
    }
    world.all_reduce(std::span<float>(values));
    world.all_reduce(std::span<float>(accumulators));
    for (std::int64_t i = 0; i < tiny_table::rows; ++i) {
      for (int j = 0; j < tiny_table::columns && found.empty(); ++j)
        found = difference("table", values[static_cast<std::size_t>(i * tiny_table::columns + j)],
                           checkpoint_value(step, seed, table_tensor, 0, i, j), i, j);
      if (found.empty())
        found = difference("table accumulator", accumulators[static_cast<std::size_t>(i)],
                           checkpoint_value(step, seed, table_tensor, 1, i, 0), i, 0);
    }
    return found;
  }
};

}  // namespace shardwise::testing
