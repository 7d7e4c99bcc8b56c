// Misuse: a sparse optimizer that updates a row but does not name its state (which checkpoints save
// by name), given to a sparse update. The compiler must say what a sparse optimizer declares (EXPECT
// in tests/CMakeLists.txt).
#include <cstddef>
#include <span>
#include <string>

#include "shardwise/nn/sparse_parameter.hpp"
#include "shardwise/optim/sparse_update.hpp"

namespace {

struct unnamed_state {
  static constexpr std::size_t state_per_row = 1;
  template <class T>
  void update_row(std::span<T> weights, std::span<const T> gradient, std::span<T> state, T learning_rate) const {
    state[0] += 1;
    for (std::size_t i = 0; i < weights.size(); ++i) weights[i] -= learning_rate * gradient[i];
  }
};

struct one_table {
  shardwise::nn::sparse_parameter<float> table{0, 4, 0, 4, 2};
  template <class F>
  void for_each_sparse_parameter(F&& f) {
    f("table", table);
  }
};

}  // namespace

void misuse(one_table& model) { shardwise::optim::sparse_update<unnamed_state> update(model); }
