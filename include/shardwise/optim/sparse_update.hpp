#pragma once
// The update of a model's embedding tables: for each table piece this rank holds
// (nn/sparse_parameter.hpp), a sparse optimizer (optim/sparse_optimizer.hpp) updates every row the batch
// touched, from the sum of its gradients, and leaves every other row and its state as they were. The
// tables are model-parallel: each rank updates its own pieces, and nothing travels.
//
//   optim::sparse_update<optim::rowwise_adagrad> tables(model);   // model.for_each_sparse_parameter
//   loop: model.forward(…); model.backward();                     // adds into the touched rows
//         tables.step(world, learning_rate);                      // updates them, clears the gradients
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "shardwise/core/checked_index.hpp"
#include "shardwise/core/kernel.hpp"
#include "shardwise/core/shared_buffer.hpp"
#include "shardwise/core/work.hpp"
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
                "shardwise::optim::sparse_update: the optimizer must model sparse_optimizer (a `static constexpr "
                "std::array<std::string_view, K> state_names`, one per value of a row's state, and "
                "update_row(weights, gradient, state, learning_rate) for float and double rows)");
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "shardwise::optim::sparse_update: tables hold float or double");

 public:
  // The model's table pieces stay where they are (the update keeps their addresses); each gets its
  // optimizer state, zero.
  template <sparse_parameterised<T> Model>
  explicit sparse_update(Model& model, Optimizer hyper_parameters = {}) : optimizer_(hyper_parameters) {
    model.for_each_sparse_parameter([&](const std::string& name, nn::sparse_parameter<T>& p) {
      tables_.push_back(
          {name, &p, shared_buffer<T>::zeros(static_cast<std::size_t>(p.rows()) * state_count<Optimizer>)});
    });
  }

  // Updates the touched rows of every table piece and clears their gradients: one kernel on the device
  // of `carrier`, the communicator the rank's model runs on (core/kernel.hpp; where it models time, the
  // kernel's roofline time, and a rank that stores no values, shapes only, updates nothing). Priced by
  // its memory traffic as the dense update is: per touched row, its gradient read and its weights and
  // state read and written. step(learning_rate) runs it on no device.
  template <class Carrier>
  void step(Carrier& carrier, T learning_rate) {
    run_kernel(
        carrier,
        [&] {
          double rows = 0, elements = 0;
          for (const auto& t : tables_) {
            const auto touched = static_cast<double>(t.parameter->gradient.touched().size());
            rows += touched;
            elements += touched * static_cast<double>(t.parameter->dimension());
          }
          return work{0, sizeof(T) * (3 * elements + 2 * static_cast<double>(state_count<Optimizer>) * rows)};
        },
        "sparse optimizer update",
        [&] {
          for (auto& t : tables_) {
            const auto& gradient = t.parameter->gradient;
            const auto touched = gradient.touched();
            for (std::size_t k = 0; k < touched.size(); ++k)
              optimizer_.update_row(t.parameter->row(touched[k]), gradient.values(k), state_row(t, touched[k]),
                                    learning_rate);
          }
        });
    for (auto& t : tables_) t.parameter->gradient.clear();
  }
  void step(T learning_rate) {
    struct no_device {
    } host;
    step(host, learning_rate);
  }

  [[nodiscard]] std::size_t table_count() const noexcept { return tables_.size(); }
  // The update has no communicator: its errors name no rank.
  [[nodiscard]] const std::string& name(std::size_t table) const {
    return element_at(tables_, table, -1, "optim::sparse_update::name", "table").name;
  }
  // A table piece, and its optimizer state: state_count<Optimizer> values per row, row-major (a checkpoint
  // writes into both as it loads: optim/model_checkpoint.hpp).
  [[nodiscard]] const nn::sparse_parameter<T>& parameter(std::size_t table) const {
    return *element_at(tables_, table, -1, "optim::sparse_update::parameter", "table").parameter;
  }
  [[nodiscard]] nn::sparse_parameter<T>& parameter(std::size_t table) {
    return *element_at(tables_, table, -1, "optim::sparse_update::parameter", "table").parameter;
  }
  [[nodiscard]] std::span<const T> state(std::size_t table) const {
    return element_at(tables_, table, -1, "optim::sparse_update::state", "table").state.span();
  }
  [[nodiscard]] std::span<T> state(std::size_t table) {
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
    return t.state.span().subspan(static_cast<std::size_t>(row) * state_count<Optimizer>, state_count<Optimizer>);
  }

  Optimizer optimizer_;
  std::vector<table> tables_;
};

}  // namespace shardwise::optim
