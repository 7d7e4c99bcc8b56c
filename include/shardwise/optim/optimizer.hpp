#pragma once
// The contract between an optimizer and the code that runs it (replicated or sharded, see sharded.hpp).
//
// An optimizer is a plain value (its hyper-parameters) that updates runs of consecutive elements of a
// parameter, called slices. The runner decides which slices a rank updates: the whole of every
// parameter when replicated, 1/N of the flat parameter buffer when sharded, so a slice may start in the
// middle of a tensor and end before its end. What an optimizer declares:
//
//   static constexpr std::array<std::string_view, K> state_names;
//       K float vectors with one element per parameter element (Adam: first and second moment). These
//       are sharded with the weights.
//   void apply(const step_info&, const slice<K>&, const tensor_context&) const;
//       the elementwise update of one slice: weights and state in place, gradients read only.
//
// An optimizer whose update needs facts about whole tensors (LAMB and LARS: norms; Adafactor: row and
// column means) also declares how to compute them from slices:
//
//   static constexpr int reduction_rounds;                        // 1 or 2 (0 or absent: elementwise)
//   std::size_t statistics_size(int round, parameter_shape) const;  // doubles per tensor in that round
//   void accumulate(int round, const step_info&, const slice<K>&, std::span<const float> tensor_state,
//                   std::span<double> statistics) const;          // add the slice's part (sums only)
//   void finish(int round, const step_info&, parameter_shape, std::span<const double> statistics,
//               std::span<float> tensor_state) const;            // after the sums are complete
//
// Statistics are sums, so a runner can add the per-shard partial results of all tensors with one
// all-reduce per round; padding is never part of a slice, so it never enters a sum. An optimizer may also
// keep a little state per tensor (`std::size_t tensor_state_size(parameter_shape) const`, Adafactor's
// factored moments: rows + cols floats). It is derived from complete statistics, so every replica holds
// the same copy of it; it is not sharded.
#include <array>
#include <concepts>
#include <cstddef>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>

namespace shardwise::optim {

// The extents of one parameter as the optimizer sees it: a matrix, row-major; a vector is 1 × n.
struct parameter_shape {
  std::size_t rows = 1;
  std::size_t cols = 1;

  [[nodiscard]] constexpr std::size_t size() const noexcept { return rows * cols; }
  friend constexpr bool operator==(const parameter_shape&, const parameter_shape&) = default;
};

// What changes from one step to the next. Steps count from 1 (Adam's bias correction uses it).
struct step_info {
  long step = 1;
  float learning_rate = 0.0f;
};

// A run of consecutive elements of one parameter: elements [first, first + weights.size()) of tensor
// `tensor` (row-major), with the averaged gradients and the K state variables of the same elements.
template <std::size_t K>
struct slice {
  std::size_t tensor = 0;
  parameter_shape shape;
  std::size_t first = 0;
  std::span<float> weights;
  std::span<const float> gradients;
  std::array<std::span<float>, K> state;

  [[nodiscard]] std::size_t size() const noexcept { return weights.size(); }
};

// What is known about the whole tensor a slice belongs to when the update runs: the complete
// statistics of every round, and the per-tensor state.
inline constexpr int max_reduction_rounds = 2;
struct tensor_context {
  parameter_shape shape;
  std::array<std::span<const double>, max_reduction_rounds> statistics;
  std::span<const float> state;
};

namespace detail {
template <class O>
constexpr int reduction_rounds_of() {
  if constexpr (requires { O::reduction_rounds; }) return O::reduction_rounds;
  else
    return 0;
}
}  // namespace detail

// How many values of state an optimizer keeps, one per name of O::state_names: per parameter element
// (a dense optimizer), or per table row (a sparse one: optim/sparse_optimizer.hpp).
template <class O>
inline constexpr std::size_t state_count = std::tuple_size_v<std::remove_cvref_t<decltype(O::state_names)>>;

// Whether an optimizer's whole-tensor statistics are per row or column of the tensor (Adafactor's
// factored moments), so that they cannot be summed over tensor-parallel pieces of it.
template <class O>
concept whole_rows_statistics = requires { requires O::statistics_per_row_and_column; };

// How many rounds of whole-tensor reductions an update needs before its elementwise part.
template <class O>
inline constexpr int reduction_rounds = detail::reduction_rounds_of<O>();

// Floats of replicated per-tensor state (0 unless the optimizer declares tensor_state_size).
template <class O>
[[nodiscard]] std::size_t tensor_state_size(const O& optimizer, parameter_shape shape) {
  if constexpr (requires { optimizer.tensor_state_size(shape); }) return optimizer.tensor_state_size(shape);
  else
    return 0;
}

template <class O>
concept elementwise_update =
    requires { O::state_names; } && requires(const O& o, const step_info& s, const slice<state_count<O>>& piece,
                                             const tensor_context& tensor) { o.apply(s, piece, tensor); };

template <class O>
concept whole_tensor_statistics =
    requires(const O& o, const step_info& s, const slice<state_count<O>>& piece, parameter_shape shape,
             std::span<const float> tensor_state, std::span<float> writable_state, std::span<double> sums,
             std::span<const double> complete) {
      { o.statistics_size(0, shape) } -> std::convertible_to<std::size_t>;
      o.accumulate(0, s, piece, tensor_state, sums);
      o.finish(0, s, shape, complete, writable_state);
    };

template <class O>
concept optimizer =
    std::copyable<O> && elementwise_update<O> && reduction_rounds<O> >= 0 &&
    reduction_rounds<O> <= max_reduction_rounds && (reduction_rounds<O> == 0 || whole_tensor_statistics<O>);

// Gives the reason in words when a type is used as an optimizer but is not one. True either way, so
// that `static_assert(require_optimizer<O>())` in a class says the reason and nothing after it.
template <class O>
constexpr bool require_optimizer() {
  static_assert(elementwise_update<O>,
                "shardwise: an optimizer declares `static constexpr std::array<std::string_view, K> state_names` and "
                "`void apply(const step_info&, const slice<K>&, const tensor_context&) const`");
  if constexpr (elementwise_update<O>) {
    static_assert(reduction_rounds<O> >= 0 && reduction_rounds<O> <= max_reduction_rounds,
                  "shardwise: an optimizer needs at most two rounds of whole-tensor reductions");
    static_assert(reduction_rounds<O> == 0 || whole_tensor_statistics<O>,
                  "shardwise: an optimizer with reduction_rounds > 0 declares statistics_size(round, shape), "
                  "accumulate(round, step, slice, tensor_state, sums) and finish(round, step, shape, sums, "
                  "tensor_state)");
    static_assert(std::copyable<O>, "shardwise: an optimizer is a plain value (copyable hyper-parameters)");
  }
  return true;
}

}  // namespace shardwise::optim
