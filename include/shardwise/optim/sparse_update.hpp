#pragma once
// The update of a model's embedding tables: for each table piece this rank holds
// (nn/sparse_parameter.hpp), a sparse optimizer (optim/sparse_optimizer.hpp) updates every row the batch
// touched, from the sum of its gradients, and leaves every other row and its state as they were. The
// tables are model-parallel: each rank updates its own pieces, and nothing travels.
//
//   optim::sparse_update<optim::rowwise_adagrad> tables(model);   // model.for_each_sparse_parameter
//   loop: model.forward(…); model.backward();                     // adds into the touched rows
//         tables.step(learning_rate);                             // updates them, clears the gradients
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "shardwise/core/checked_index.hpp"
#include "shardwise/core/element_memory.hpp"
#include "shardwise/core/shared_buffer.hpp"
#include "shardwise/nn/sparse_parameter.hpp"
#include "shardwise/optim/sparse_optimizer.hpp"

namespace shardwise::optim {

// A model (or layer) whose embedding tables a sparse update can take: for_each_sparse_parameter(f)
// calls f(name, p) for each nn::sparse_parameter p this rank holds.
template <class M, class T>
concept sparse_parameterised =
    requires(M& model) { model.for_each_sparse_parameter([](const std::string&, nn::sparse_parameter<T>&) {}); };

template <class Optimizer, class T = float>
class sparse_update {
  static_assert(sparse_optimizer<Optimizer>,
                "shardwise::optim::sparse_update: the optimizer must model sparse_optimizer (a static state_per_row "
                "and update_row(weights, gradient, state, learning_rate) for float and double rows)");
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "shardwise::optim::sparse_update: tables hold float or double");

 public:
  // The model's table pieces stay where they are (the update keeps their addresses); each gets its
  // optimizer state, zero.
  template <sparse_parameterised<T> Model>
  explicit sparse_update(Model& model, Optimizer hyper_parameters = {}) : optimizer_(hyper_parameters) {
    model.for_each_sparse_parameter([&](const std::string& name, nn::sparse_parameter<T>& p) {
      tables_.push_back(
          {name, &p, shared_buffer<T>::zeros(static_cast<std::size_t>(p.rows()) * Optimizer::state_per_row)});
    });
  }

  // Updates the touched rows of every table piece and clears their gradients. A rank that stores no
  // values (shapes only, core/element_memory.hpp) has no rows to update.
  void step(T learning_rate) {
    const bool values = element_memory::stored_on_this_thread();
    for (auto& table : tables_) {
      auto& gradient = table.parameter->gradient;
      const auto touched = gradient.touched();
      for (std::size_t k = 0; values && k < touched.size(); ++k)
        optimizer_.update_row(table.parameter->row(touched[k]), gradient.values(k), state_row(table, touched[k]),
                              learning_rate);
      gradient.clear();
    }
  }

  [[nodiscard]] std::size_t table_count() const noexcept { return tables_.size(); }
  // The update has no communicator: its errors name no rank.
  [[nodiscard]] const std::string& name(std::size_t table) const {
    return element_at(tables_, table, -1, "optim::sparse_update::name", "table").name;
  }
  // A table piece's optimizer state: state_per_row values per row, row-major.
  [[nodiscard]] std::span<const T> state(std::size_t table) const {
    return element_at(tables_, table, -1, "optim::sparse_update::state", "table").state.span();
  }
  [[nodiscard]] const Optimizer& optimizer() const noexcept { return optimizer_; }

 private:
  struct table {
    std::string name;
    nn::sparse_parameter<T>* parameter;
    shared_buffer<T> state;  // storage of the rank, as the tables' values are
  };
  static std::span<T> state_row(table& t, std::int64_t row) {
    return t.state.span().subspan(static_cast<std::size_t>(row) * Optimizer::state_per_row, Optimizer::state_per_row);
  }

  Optimizer optimizer_;
  std::vector<table> tables_;
};

}  // namespace shardwise::optim
