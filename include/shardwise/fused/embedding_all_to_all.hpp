#pragma once
// Embedding-bag + all-to-all, fused (Punniyamurthy, Beckmann, Hamidouche: GPU-initiated fine-grained
// overlap of collective communication with computation).
//
// Embedding tables are split table-wise over the ranks; each rank pools (sum or mean, over bags of any
// length given as offsets + indices, as PyTorch's EmbeddingBag) every row of the global batch for its
// own tables, and the result is redistributed to the data-parallel batch split: rank d ends with
// {local batch, tables × dimension}. The operator is the plan (who pools what, in which slices and
// order: fused/embedding_plan.hpp), the kernels (fused/embedding_kernels.hpp), and a backend that
// moves the slices and accounts for their time (fused/embedding_backend.hpp; host_backend for threads
// and MPI, modelled_backend for simulated GPUs):
//
//   baseline()  pool everything, then one all_to_all_v, then unpack into the output layout
//   fused()     pool slice by slice; the task that completes a slice's done-bitmask hands the slice to
//               its destination as the backend says (stored into its output, put there, or sent as a
//               message: fused/slice_exchange.hpp) and raises its ready flag there; other ranks' slices
//               first (fused/embedding_plan.hpp); each rank then waits for its incoming slices
//   operator()  fused() when the cost model predicts a gain, else baseline() ("never worse"); without a
//               machine model it measures instead (comm/path_trial.hpp)
// Both give bitwise the same output (each row is pooled by the same code in the same order).
//
// Backward, from the gradient of each rank's output, into the gradients of the tables (the rows each
// bag looked up, as nn::sparse_rows holds them):
//   baseline_backward()  pack the output gradient by owner, one all_to_all_v, then each table's
//                        scatter-add over the whole global batch
//   fused_backward()     send the slices other ranks' tables need first (stored into the owner's buffer,
//                        put, or sent, with a flag), then add this rank's own rows, then each other
//                        rank's rows as its slices arrive, source by source in the plan's order (table
//                        by table, each table's sources in turn, in the table_by_table order)
//   backward()           as operator() chooses, on its own (options.backward_choice)
// Both add each table's rows in the same order, so the tables' gradients are the same bits.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "shardwise/comm/communicator.hpp"
#include "shardwise/comm/computed_on_root.hpp"
#include "shardwise/comm/output_stores.hpp"
#include "shardwise/comm/path_trial.hpp"
#include "shardwise/core/checked_arithmetic.hpp"
#include "shardwise/core/element_memory.hpp"
#include "shardwise/core/error.hpp"
#include "shardwise/core/reused_buffer.hpp"
#include "shardwise/fused/embedding_backend.hpp"
#include "shardwise/fused/embedding_cost.hpp"
#include "shardwise/fused/embedding_kernels.hpp"
#include "shardwise/fused/embedding_modelled_backend.hpp"
#include "shardwise/fused/embedding_options.hpp"
#include "shardwise/fused/embedding_plan.hpp"
#include "shardwise/fused/primitives.hpp"
#include "shardwise/fused/slice_exchange.hpp"

namespace shardwise::fused {

namespace detail {

inline std::size_t total(const std::vector<int>& counts) {
  std::size_t n = 0;
  for (const int c : counts) n += static_cast<std::size_t>(c);
  return n;
}

}  // namespace detail

template <communicator Comm, class T = float, class Backend = default_embedding_backend_t<Comm>>
class embedding_all_to_all {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "shardwise::fused::embedding_all_to_all: tables hold float or double");
  static constexpr bool backend_fits = embedding_backend<Backend>;
  static_assert(backend_fits,
                "shardwise::fused::embedding_all_to_all: the backend must model fused::embedding_backend (its "
                "communicators, group_of, delivery_to, machine, models_time, and the kernels: "
                "fused/embedding_backend.hpp)");
  static constexpr std::string_view name = "embedding_all_to_all";
  static constexpr int slice_tag = 0x6e6d;
  static constexpr int gradient_tag = 0x6e6e;

 public:
  // Past a refused backend, the communicator's default stands in, so that the refusal above is the
  // build's one error.
  using backend_type = std::conditional_t<backend_fits, Backend, default_embedding_backend_t<Comm>>;

  // Collective: every rank constructs it with the same shape and options.
  embedding_all_to_all(Comm& comm, embedding_shape shape, embedding_options options = {})
      : comm_(&comm),
        options_(std::move(options)),
        backend_(comm, options_),
        plan_(shape, comm.size(), chosen_slice_rows(shape), order(), comm.world_rank()),
        done_(plan_.tasks_per_slice(comm.rank()), tasks_run::on_one_thread),
        outputs_(backend_, static_cast<std::size_t>(plan_.output_floats(comm.rank())), plan_.flags_at(comm.rank()),
                 slice_tag, name) {
    choose_paths(options_.choice, options_.backward_choice);
    // Whether storing around the caches pays differs between machines (on one it took a fifth off the
    // largest calls, on another it made the fused path's a third slower), so without a machine model
    // each path measures both kinds, as operator() measures the paths. Every rank asks whether any rank
    // writes enough to stream, so that all take part in the trials' collectives.
    bool any_streams = false;
    for (int r = 0; r < comm.size(); ++r) any_streams = any_streams || streams(r);
    if (any_streams && backend_.machine() == nullptr)
      for (auto& choice : row_stores_) choice.trial.emplace();
  }
  embedding_all_to_all(const embedding_all_to_all&) = delete;
  embedding_all_to_all& operator=(const embedding_all_to_all&) = delete;

  [[nodiscard]] const embedding_plan& plan() const noexcept { return plan_; }
  // Whether fused() stores the slices for `peer` straight into its output (its own always; else they
  // leave as messages, or on sim_gpu as puts from a staging buffer to another node).
  [[nodiscard]] bool stores_in_place(int peer) const {
    if (peer < 0 || peer >= comm_->size())
      throw argument_error(
          comm_->world_rank(), "embedding_all_to_all::stores_in_place",
          "peer " + std::to_string(peer) + " is not one of the " + std::to_string(comm_->size()) + " ranks");
    return backend_.delivery_to(peer) == delivery::store;
  }
  // Whether operator() takes the fused path (while it is still measuring, the path of its next call).
  [[nodiscard]] bool fuses() const noexcept { return trial_ ? trial_->first_path_next() : fuses_; }
  // Whether operator() is still timing both paths (path::automatic without a machine model).
  [[nodiscard]] bool measuring() const noexcept { return trial_.has_value(); }
  static constexpr int least_trial_calls = path_trial::least_calls;
  static constexpr int most_trial_calls = path_trial::most_calls;
  static constexpr std::chrono::duration<double> trial_time = path_trial::time;
  // The paths operator() and backward() take from now on: path::fused, path::baseline, or
  // path::automatic, decided by the machine model or, without one, measured by their next calls.
  // Collective: every rank chooses alike.
  void choose_paths(path forward, path backward) {
    options_.choice = forward;
    options_.backward_choice = backward;
    trial_.reset();
    backward_trial_.reset();
    if (forward == path::automatic && backend_.machine() == nullptr) trial_.emplace();
    else
      fuses_ = decide(forward, [&](const sim::machine& m, std::int64_t bag) {
        return predict(plan_, m, options_.gpu_initiated, bag);
      });
    if (backward == path::automatic && backend_.machine() == nullptr) backward_trial_.emplace();
    else
      fuses_backward_ = decide(backward, [&](const sim::machine& m, std::int64_t bag) {
        return predict_backward(plan_, m, options_.gpu_initiated, bag);
      });
  }
  // Calls made so far (the epoch the last fused call's flags carry).
  [[nodiscard]] std::uint64_t epoch() const noexcept { return outputs_.epoch(); }

  // `tables`: this rank's tables (plan().tables_of(rank), each rows × dimension elements, row-major);
  // `bags`: their lookups for the global batch. Returns this rank's output {local batch, tables ×
  // dimension}, valid until this rank's next call.
  std::span<const T> operator()(std::span<const std::span<const T>> tables, std::span<const embedding_bags> bags) {
    if (!trial_) return fuses_ ? fused(tables, bags) : baseline(tables, bags);
    const auto out =
        trial_->call(*comm_, [&](bool fuse) { return fuse ? fused(tables, bags) : baseline(tables, bags); });
    if (trial_->done()) {
      fuses_ = trial_->chose_first();
      trial_.reset();
    }
    return out;
  }

  // How the next forward call of `which` (path::fused or path::baseline) stores this rank's pooled rows,
  // and the baseline what its exchange receives and unpacks: not at all where the rank stores no
  // elements; through the caches where it writes less than the threads backend's collectives stream
  // (comm/detail/streaming_store.hpp); else as the path has chosen: around the caches with a machine
  // model, and without one the faster kind in its first calls (while it measures, the kind of its next
  // call). Asked once a call, not in pool_bag: a call made there once a bag waited behind the previous
  // bag's stores into the peers' outputs.
  [[nodiscard]] row_stores forward_row_stores(path which) const {
    if (which == path::automatic)
      throw argument_error(comm_->world_rank(), "embedding_all_to_all::forward_row_stores",
                           "path::automatic is no path of its own: ask for path::fused or path::baseline");
    const auto& choice = row_stores_[row_stores_slot(which)];
    return stores_when(choice.trial ? choice.trial->first_path_next() : choice.streams);
  }
  // Whether `which` (path::fused or path::baseline; path::automatic: either) is still timing its calls
  // with both kinds of stores.
  [[nodiscard]] bool measuring_row_stores(path which) const noexcept {
    if (which == path::automatic) return measuring_row_stores(path::fused) || measuring_row_stores(path::baseline);
    return row_stores_[row_stores_slot(which)].trial.has_value();
  }

  std::span<const T> baseline(std::span<const std::span<const T>> tables, std::span<const embedding_bags> bags) {
    return with_row_stores(path::baseline, [&](row_stores stores) { return baseline(tables, bags, stores); });
  }

  std::span<const T> fused(std::span<const std::span<const T>> tables, std::span<const embedding_bags> bags) {
    return with_row_stores(path::fused, [&](row_stores stores) { return fused(tables, bags, stores); });
  }
  // The baseline's pooling alone, stored as its next call would store it: this rank's bags pooled for
  // the global batch, {global batch, this rank's tables side by side}, nothing exchanged; valid until
  // this rank's next call. Not collective. The least any forward path that reads the tables can take:
  // what benchmarks set the paths beside.
  std::span<const T> pooling_alone(std::span<const std::span<const T>> tables, std::span<const embedding_bags> bags) {
    check(tables, bags);
    return pool_for_exchange(tables, bags, forward_row_stores(path::baseline));
  }

 private:
  std::span<const T> baseline(std::span<const std::span<const T>> tables, std::span<const embedding_bags> bags,
                              row_stores stores) {
    begin_call(tables, bags);
    const int P = comm_->size(), r = rank();
    const auto [send_counts, receive_counts] = baseline_counts(direction::forward);
    const auto pooled = pool_for_exchange(tables, bags, stores);
    const auto received = receive_buffer_.take(detail::total(receive_counts));
    comm_->all_to_all_v(std::span<const T>(pooled), send_counts, received, receive_counts, exchange_stores(stores));
    // Unpack: the block from s is {local rows, tables of s side by side}; they sit at s's first column.
    // Stored as the pooled rows were, so the output is written the same way on both paths.
    const auto out = outputs_.buffer();
    backend_.launch(unpack_work(plan_, r), "unpack all-to-all", [&] {
      const auto row_width = static_cast<std::size_t>(plan_.row_width());
      std::size_t from = 0;
      for (int s = 0; s < P; ++s) {
        const auto block_width = static_cast<std::size_t>(plan_.width_of(s));
        const auto column = static_cast<std::size_t>(plan_.column_of(plan_.first_table(s)));
        for (std::size_t row = 0; row < static_cast<std::size_t>(plan_.rows_of(r)); ++row, from += block_width)
          shardwise::detail::store_elements(out.data() + row * row_width + column, received.data() + from, block_width,
                                            stores == row_stores::streaming);
      }
      if (stores == row_stores::streaming) shardwise::detail::finish_streaming();
    });
    return out;
  }

  std::span<const T> fused(std::span<const std::span<const T>> tables, std::span<const embedding_bags> bags,
                           row_stores stores) {
    begin_call(tables, bags);
    const int P = comm_->size(), r = rank();
    const auto elements = [&](const embedding_slice& slice) {
      return static_cast<std::size_t>(slice.rows * plan_.dimension_of(slice.table));
    };
    // Slices arriving as messages: receives posted up front in each sender's order, unpacked at the end.
    struct arriving {
      embedding_slice slice;
      std::size_t at;
    };
    std::vector<arriving> incoming;
    std::size_t received_elements = 0;
    for (int s = 0; s < P; ++s)
      if (outputs_.delivery_to(s) == delivery::message)
        for (const auto& slice : plan_.slices(s))
          if (slice.destination == r) {
            incoming.push_back({slice, received_elements});
            received_elements += elements(slice);
          }
    const auto received = receive_buffer_.take(received_elements);
    for (const auto& a : incoming)
      outputs_.receive(plan_.owner_of(a.slice.table), received.subspan(a.at, elements(a.slice)));
    // Slices that leave through a buffer (messages, puts): each its own range, kept until it has left.
    std::size_t leaving = 0;
    for (int d = 0; d < P; ++d)
      if (outputs_.delivery_to(d) != delivery::store) leaving += static_cast<std::size_t>(plan_.block_floats(r, d));
    const auto sending = send_buffer_.take(leaving);
    auto kernel = backend_.fused_kernel(plan_);
    // Where a slice's rows go is worked out once a slice, not once a task: with one lookup a bag (as
    // Criteo's tables are looked up) working it out for every row took an eighth of the call.
    const auto slices = plan_.slices(r);
    const int world_rank = comm_->world_rank();
    const auto row_width = static_cast<std::size_t>(plan_.row_width());
    std::size_t next = 0;
    for (std::size_t s = 0; s < slices.size(); ++s) {
      const auto& slice = slices[s];
      const int d = slice.destination, D = plan_.dimension_of(slice.table);
      const auto how = outputs_.delivery_to(d);
      const auto t = static_cast<std::size_t>(slice.table - plan_.first_table(r));
      // Stored in place, the rows land in d's output a whole output row apart; otherwise one after
      // another in this slice's range of the send buffer, kept until the slice has left.
      T* const staged = sending.data() + (how == delivery::store ? 0 : next);
      if (how != delivery::store) next += elements(slice);
      const auto offset = static_cast<std::size_t>(plan_.output_offset(d, slice.table, slice.first_row));
      T* const first = how == delivery::store ? outputs_.peer_buffer(d) + offset : staged;
      const auto stride = how == delivery::store ? row_width : static_cast<std::size_t>(D);
      for (std::int64_t task = 0; task < slice.rows; ++task) {
        const std::int64_t row = slice.first_row + task;
        pool_bag(tables[t], static_cast<int>(t), D, bags[t], row, options_.pooling,
                 first + static_cast<std::size_t>(task) * stride, world_rank, stores);
        kernel.task(slice, task, lookups(bags[t], row));
        // The task that fills the done-bitmask sends the slice, or raises its flag where it was stored.
        if (!done_.complete(s, task)) continue;
        if (stores == row_stores::streaming) shardwise::detail::finish_streaming();
        const std::span<const T> pooled(staged, elements(slice));
        if (how == delivery::message) {
          outputs_.send(d, pooled);
          continue;
        }
        if (how == delivery::put)
          for (std::size_t i = 0; i < static_cast<std::size_t>(slice.rows); ++i)
            outputs_.put(d, offset + i * row_width,
                         pooled.subspan(i * static_cast<std::size_t>(D), static_cast<std::size_t>(D)));
        outputs_.signal(d, slice.flag);
      }
    }
    const auto per_table = static_cast<std::size_t>(plan_.slices_to(r));
    for (std::size_t f = 1; f < plan_.flags_at(r); ++f) {
      const auto table = static_cast<int>((f - 1) / per_table);
      if (outputs_.delivery_to(plan_.owner_of(table)) == delivery::message) continue;
      outputs_.wait(f, [&] {
        return "slice " + std::to_string((f - 1) % per_table) + " of table " + std::to_string(table) + " from rank " +
               std::to_string(plan_.owner_of(table));
      });
    }
    outputs_.wait_receives();
    const auto out = outputs_.buffer();
    if (stores != row_stores::none) {
      for (const auto& a : incoming) {
        const auto D = static_cast<std::size_t>(plan_.dimension_of(a.slice.table));
        T* const first = out.data() + plan_.output_offset(r, a.slice.table, a.slice.first_row);
        for (std::size_t row = 0; row < static_cast<std::size_t>(a.slice.rows); ++row)
          shardwise::detail::store_elements(first + row * row_width, received.data() + a.at + row * D, D,
                                            stores == row_stores::streaming);
      }
      if (stores == row_stores::streaming) shardwise::detail::finish_streaming();
    }
    outputs_.wait_sends();
    backend_.end_fused_kernel(kernel);
    return out;
  }

 public:
  // ---- backward

  // Whether backward() takes the fused path (while it is still measuring, the path of its next call).
  [[nodiscard]] bool fuses_backward() const noexcept {
    return backward_trial_ ? backward_trial_->first_path_next() : fuses_backward_;
  }
  [[nodiscard]] bool measuring_backward() const noexcept { return backward_trial_.has_value(); }

  // `output_gradient`: the gradient of this rank's output {local batch, plan().row_width()}; `bags`: the
  // lookups the forward pooled; `gradients`: one per table of this rank, added into (each row a bag looked
  // up gets that bag's gradient, over its length for a mean). Collective, as the forward.
  template <gradient_rows<T> Rows>
  void backward(std::span<const T> output_gradient, std::span<const embedding_bags> bags,
                std::span<Rows* const> gradients) {
    if (!backward_trial_) {
      if (fuses_backward_) fused_backward(output_gradient, bags, gradients);
      else
        baseline_backward(output_gradient, bags, gradients);
      return;
    }
    (void)backward_trial_->call(*comm_, [&](bool fuse) {
      if (fuse) fused_backward(output_gradient, bags, gradients);
      else
        baseline_backward(output_gradient, bags, gradients);
      return 0;
    });
    if (backward_trial_->done()) {
      fuses_backward_ = backward_trial_->chose_first();
      backward_trial_.reset();
    }
  }

  template <gradient_rows<T> Rows>
  void baseline_backward(std::span<const T> output_gradient, std::span<const embedding_bags> bags,
                         std::span<Rows* const> gradients) {
    check_backward(output_gradient, bags, gradients);
    const int P = comm_->size(), r = rank();
    const auto row_width = static_cast<std::size_t>(plan_.row_width());
    // Packed by owner o: {o's tables, this rank's rows, D_t}; received from s: {this rank's tables, s's rows, D_t}.
    const auto [send_counts, receive_counts] = baseline_counts(direction::backward);
    const auto packed = send_buffer_.take(detail::total(send_counts));
    const auto received = receive_buffer_.take(detail::total(receive_counts));
    backend_.launch(unpack_work(plan_, r), "pack all-to-all", [&] {
      std::size_t at = 0;
      for (int t = 0; t < plan_.shape().tables; ++t) {
        const auto D = static_cast<std::size_t>(plan_.dimension_of(t));
        for (std::int64_t b = 0; b < plan_.rows_of(r); ++b, at += D)
          std::copy_n(
              output_gradient.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(b) * row_width +
                                                                    static_cast<std::size_t>(plan_.column_of(t))),
              D, packed.begin() + static_cast<std::ptrdiff_t>(at));
      }
    });
    comm_->all_to_all_v(std::span<const T>(packed), send_counts, received, receive_counts);
    std::vector<std::size_t> block_of(static_cast<std::size_t>(P) + 1, 0);
    for (int s = 0; s < P; ++s)
      block_of[static_cast<std::size_t>(s) + 1] =
          block_of[static_cast<std::size_t>(s)] + static_cast<std::size_t>(receive_counts[static_cast<std::size_t>(s)]);
    // Each table's scatter-add over the global batch, its sources in the plan's order.
    const bool values = element_memory::stored_on_this_thread();  // shapes only: touch the rows, do not sum
    for (int t = 0; t < plan_.tables_of(r); ++t) {
      const int table = plan_.first_table(r) + t;
      const int D = plan_.dimension_of(table);
      const auto& bag = bags[static_cast<std::size_t>(t)];
      auto& gradient = *gradients[static_cast<std::size_t>(t)];
      auto kernel = backend_.kernel(plan_.shape().global_batch);
      for (int k = 0; k < P; ++k) {
        const int s = plan_.gradient_source(r, k);
        const T* block = received.data() + block_of[static_cast<std::size_t>(s)] +
                         static_cast<std::size_t>(plan_.rows_of(s) *
                                                  (plan_.column_of(table) - plan_.column_of(plan_.first_table(r))));
        for (std::int64_t i = 0; i < plan_.rows_of(s); ++i) {
          const std::int64_t row = plan_.first_row(s) + i;
          add_bag_gradient(gradient, t, bag, row, options_.pooling, block + i * D, comm_->world_rank(), values);
          kernel.run_task(scatter_work(lookups(bag, row), D), "task");
        }
      }
      backend_.end_kernel(kernel, "scatter-add, table " + std::to_string(table));
    }
  }

  template <gradient_rows<T> Rows>
  void fused_backward(std::span<const T> output_gradient, std::span<const embedding_bags> bags,
                      std::span<Rows* const> gradients) {
    check_backward(output_gradient, bags, gradients);
    auto& exchange = backward_exchange();
    exchange.begin_call(options_.timeout);
    const int P = comm_->size(), r = rank();
    const auto row_width = static_cast<std::size_t>(plan_.row_width());
    const auto elements = [&](const embedding_slice& slice) {
      return static_cast<std::size_t>(slice.rows * plan_.dimension_of(slice.table));
    };
    const auto buffer = exchange.buffer();
    // Slices arriving as messages: received straight into this call's buffer, posted up front in each
    // sender's order.
    std::vector<std::size_t> receive_of(plan_.backward_flags_at(r), 0);
    for (int k = 1; k < P; ++k) {
      const int s = plan_.gradient_source(r, k);
      if (exchange.delivery_to(s) != delivery::message) continue;
      for (int t = plan_.first_table(r); t < plan_.first_table(r + 1); ++t)
        for (std::int64_t i = 0; i < plan_.slices_to(s); ++i) {
          const auto slice = plan_.gradient_slice(t, s, i);
          receive_of[slice.flag] = exchange.receive(
              s, buffer.subspan(static_cast<std::size_t>(plan_.gradient_offset(t, slice.first_row)), elements(slice)));
        }
    }
    // This rank's slices for the other owners, first: copied from its output gradient into the owner's
    // buffer (or a staging buffer, for puts and messages), then handed over with their flags.
    const auto slices = plan_.gradient_slices(r);
    std::size_t leaving = 0;
    for (const auto& slice : slices)
      if (exchange.delivery_to(slice.destination) != delivery::store) leaving += elements(slice);
    const auto staging = send_buffer_.take(leaving);
    auto kernel = backend_.fused_backward_kernel(plan_);
    const bool values = element_memory::stored_on_this_thread();  // shapes only: nothing to copy
    std::size_t at = 0;
    for (const auto& slice : slices) {
      const int o = slice.destination;
      const auto D = static_cast<std::size_t>(plan_.dimension_of(slice.table));
      const auto how = exchange.delivery_to(o);
      const auto offset = static_cast<std::size_t>(plan_.gradient_offset(slice.table, slice.first_row));
      T* into = how == delivery::store ? exchange.peer_buffer(o) + offset : staging.data() + at;
      if (how != delivery::store) at += elements(slice);
      if (values) {
        const T* const rows = output_gradient.data() +
                              static_cast<std::size_t>(slice.first_row - plan_.first_row(r)) * row_width +
                              static_cast<std::size_t>(plan_.column_of(slice.table));
        for (std::size_t i = 0; i < static_cast<std::size_t>(slice.rows); ++i)
          std::copy_n(rows + i * row_width, D, into + i * D);
      }
      kernel.send(slice);
      const std::span<const T> data(into, elements(slice));
      if (how == delivery::message) {
        exchange.send(o, data);
        continue;
      }
      if (how == delivery::put) exchange.put(o, offset, data);
      exchange.signal(o, slice.flag);
    }
    // Then every row into this rank's tables: its own from its output gradient, the others' from the
    // buffer, each slice once it is there; where a slice's rows lie worked out once a slice, as in the
    // forward.
    const int world_rank = comm_->world_rank();
    plan_.for_each_gradient_slice(r, [&](int source, const embedding_slice& slice) {
      const auto t = static_cast<std::size_t>(slice.table - plan_.first_table(r));
      const T* first = nullptr;
      std::size_t stride = 0;
      if (source == r) {
        first = output_gradient.data() + static_cast<std::size_t>(slice.first_row - plan_.first_row(r)) * row_width +
                static_cast<std::size_t>(plan_.column_of(slice.table));
        stride = row_width;
      } else {
        if (exchange.delivery_to(source) == delivery::message) {
          exchange.wait_receive(receive_of[slice.flag]);
        } else {
          exchange.wait(slice.flag, [&] {
            return "the gradient of rows " + std::to_string(slice.first_row) + "-" +
                   std::to_string(slice.first_row + slice.rows - 1) + " of table " + std::to_string(slice.table) +
                   " from rank " + std::to_string(source);
          });
        }
        first = buffer.data() + plan_.gradient_offset(slice.table, slice.first_row);
        stride = static_cast<std::size_t>(plan_.dimension_of(slice.table));
      }
      for (std::int64_t i = 0; i < slice.rows; ++i) {
        const std::int64_t row = slice.first_row + i;
        add_bag_gradient(*gradients[t], static_cast<int>(t), bags[t], row, options_.pooling,
                         first + static_cast<std::size_t>(i) * stride, world_rank, values);
        kernel.add(slice.table, source, slice.flag, lookups(bags[t], row));
      }
    });
    exchange.wait_receives();
    exchange.wait_sends();
    backend_.end_fused_kernel(kernel);
  }

 private:
  enum class direction { forward, backward };
  struct all_to_all_counts {
    std::vector<int> send, receive;
  };
  // The baseline all-to-all's counts per peer: the forward sends each peer d its block of pooled rows
  // (block_floats(rank, d)); the backward sends the transpose, each owner o its tables' columns.
  [[nodiscard]] all_to_all_counts baseline_counts(direction way) const {
    all_to_all_counts counts;
    const int r = rank();
    for (int peer = 0; peer < comm_->size(); ++peer) {
      const auto out = plan_.block_floats(r, peer), in = plan_.block_floats(peer, r);
      counts.send.push_back(static_cast<int>(way == direction::forward ? out : in));
      counts.receive.push_back(static_cast<int>(way == direction::forward ? in : out));
    }
    return counts;
  }
  [[nodiscard]] int rank() const { return comm_->rank(); }
  // Whether rank r writes in a forward call as much as the threads backend's collectives stream.
  [[nodiscard]] bool streams(int r) const {
    const auto bytes = static_cast<std::size_t>(plan_.shape().global_batch * plan_.width_of(r)) * sizeof(T);
    return shardwise::detail::streams_bytes(bytes);
  }
  // This rank's stores where its path streams or not.
  [[nodiscard]] row_stores stores_when(bool streaming) const {
    if (!element_memory::stored_on_this_thread()) return row_stores::none;
    return streaming && streams(rank()) ? row_stores::streaming : row_stores::cached;
  }
  // The baseline's exchange stores as its pooled rows are stored, so that its kinds of stores are timed
  // whole. The backend decides by size where this rank pools too little to stream, having no kind of
  // its own to time (with uneven tables it may still receive much), and in shapes-only mode.
  [[nodiscard]] output_stores exchange_stores(row_stores stores) const {
    if (stores == row_stores::none || !streams(rank())) return output_stores::by_size;
    return stores == row_stores::streaming ? output_stores::around_caches : output_stores::through_caches;
  }
  // run(stores) for the next forward call of `which`, timed while the path measures its kinds of stores
  // (the streaming kind first).
  template <class Run>
  std::span<const T> with_row_stores(path which, Run run) {
    auto& choice = row_stores_[row_stores_slot(which)];
    if (!choice.trial) return run(forward_row_stores(which));
    const auto out = choice.trial->call(*comm_, [&](bool streaming) { return run(stores_when(streaming)); });
    if (choice.trial->done()) {
      choice.streams = choice.trial->chose_first();
      choice.trial.reset();
    }
    return out;
  }
  // The baseline's first phase: this rank's bags pooled into its send buffer, a block for each rank d,
  // {d's rows, this rank's tables side by side}: together {global batch, this rank's tables side by side}.
  std::span<T> pool_for_exchange(std::span<const std::span<const T>> tables, std::span<const embedding_bags> bags,
                                 row_stores stores) {
    const int r = rank();
    const auto width = plan_.width_of(r);
    const auto pooled = send_buffer_.take(static_cast<std::size_t>(plan_.shape().global_batch * width));
    for (int t = 0; t < plan_.tables_of(r); ++t) {
      const auto& table = tables[static_cast<std::size_t>(t)];
      const auto& bag = bags[static_cast<std::size_t>(t)];
      const int D = plan_.dimension_of(plan_.first_table(r) + t);
      const auto column = plan_.column_of(plan_.first_table(r) + t) - plan_.column_of(plan_.first_table(r));
      auto kernel = backend_.kernel(plan_.shape().global_batch);
      for (std::int64_t row = 0; row < plan_.shape().global_batch; ++row) {
        pool_bag(table, t, D, bag, row, options_.pooling,
                 pooled.data() + static_cast<std::size_t>(row * width + column), comm_->world_rank(), stores);
        kernel.run_task(pooling_work(lookups(bag, row), D), "task");
      }
      backend_.end_kernel(kernel, "pooling, table " + std::to_string(plan_.first_table(r) + t));
    }
    if (stores == row_stores::streaming) shardwise::detail::finish_streaming();
    return pooled;
  }
  // Both paths start so: the inputs checked, and the call begun (its number, and the group told that
  // this rank's output of the call before the last may be overwritten).
  void begin_call(std::span<const std::span<const T>> tables, std::span<const embedding_bags> bags) {
    check(tables, bags);
    outputs_.begin_call(options_.timeout);
  }

  // Where every slice is stored in place on real memory there is no transfer to start early: the table
  // by table order keeps each table in cache; elsewhere the remote slices go first. A kernel per table
  // runs a table's tasks together.
  [[nodiscard]] slice_order order() const {
    if (options_.order != slice_order::automatic) return options_.order;
    if (backend_type::models_time && options_.gpu_initiated.kernel_per_table) return slice_order::table_by_table;
    return stores_everywhere() ? slice_order::table_by_table : slice_order::communication_aware;
  }
  // Whether every slice is stored straight into its destination's output in real memory (threads; MPI
  // ranks of one node).
  [[nodiscard]] bool stores_everywhere() const {
    bool all = !backend_type::models_time;
    for (int p = 0; p < comm_->size(); ++p) all = all && backend_.delivery_to(p) == delivery::store;
    return all;
  }
  [[nodiscard]] std::int64_t expected_bag_length() const {
    return std::max<std::int64_t>(1, options_.expected_bag_length);
  }

  [[nodiscard]] std::int64_t chosen_slice_rows(const embedding_shape& shape) const {
    if (options_.slice_rows != automatic_slice_rows) return options_.slice_rows;
    const sim::machine* machine = backend_.machine();
    // Without a model: stored in place, a slice has no transfer to overlap and the destination waits for
    // all of them at the end, so a slice per table and destination has the fewest flags to raise and
    // wait for; where slices travel, the paper's size.
    if (machine == nullptr)
      return stores_everywhere() ? ceil_divide(shape.global_batch, comm_->size()) : paper_slice_rows;
    return predicted_on_rank_0([&] {
      return best_slice_rows(shape, comm_->size(), order(), *machine, options_.gpu_initiated, expected_bag_length())
          .rows;
    });
  }

  // A prediction every rank needs alike: rank 0 makes it and broadcasts it, since every rank making it
  // would simulate all P ranks P times over (at 128 ranks, most of a simulated run's time and memory).
  // Collective.
  template <class Predict>
  [[nodiscard]] std::int64_t predicted_on_rank_0(Predict&& predict) const {
    return computed_on_root<std::int64_t>(backend_.data_communicator(), 0, 1, name, [&] {
      return std::vector<std::int64_t>{std::forward<Predict>(predict)()};
    })[0];
  }

  // Whether to fuse, as `choice` says or, for path::automatic, as the machine model predicts (`predict`
  // gives both paths' times; without a model the operator measures instead: path_trial).
  template <class Predict>
  [[nodiscard]] bool decide(path choice, Predict&& predict) const {
    if (choice != path::automatic) return choice == path::fused;
    return predicted_on_rank_0([&] {
             const auto times = predict(*backend_.machine(), expected_bag_length());
             return times.fused <= times.baseline ? 1 : 0;
           }) == 1;
  }

  // The backward's buffers, made at its first call (collective, as every backward call is): a forward
  // alone never pays for them.
  slice_exchange<T, backend_type>& backward_exchange() {
    if (!gradients_)
      gradients_.emplace(backend_, static_cast<std::size_t>(plan_.gradient_floats(rank())),
                         plan_.backward_flags_at(rank()), gradient_tag, "embedding_all_to_all::backward");
    return *gradients_;
  }

  void check(std::span<const std::span<const T>> tables, std::span<const embedding_bags> bags) const {
    const auto local = static_cast<std::size_t>(plan_.tables_of(rank()));
    if (tables.size() != local)
      fail(name,
           "this rank owns " + std::to_string(local) + " tables; got " + std::to_string(tables.size()) + " tables");
    check_bags(name, bags);
    for (std::size_t t = 0; t < local; ++t) {
      const auto D = static_cast<std::size_t>(plan_.dimension_of(plan_.first_table(rank()) + static_cast<int>(t)));
      if (tables[t].size() % D != 0)
        fail(name, "table " + std::to_string(t) + " has " + std::to_string(tables[t].size()) +
                       " elements, not a multiple of its dimension " + std::to_string(D));
    }
  }
  template <class Rows>
  void check_backward(std::span<const T> output_gradient, std::span<const embedding_bags> bags,
                      std::span<Rows* const> gradients) const {
    constexpr std::string_view operation = "embedding_all_to_all::backward";
    const auto local = static_cast<std::size_t>(plan_.tables_of(rank()));
    if (output_gradient.size() != static_cast<std::size_t>(plan_.output_floats(rank())))
      fail(operation, "the output's gradient must have the output's " + std::to_string(plan_.output_floats(rank())) +
                          " elements; got " + std::to_string(output_gradient.size()));
    check_bags(operation, bags);
    if (gradients.size() != local)
      fail(operation, "this rank owns " + std::to_string(local) + " tables; got " + std::to_string(gradients.size()) +
                          " gradients");
    for (std::size_t t = 0; t < local; ++t) {
      const int D = plan_.dimension_of(plan_.first_table(rank()) + static_cast<int>(t));
      if (gradients[t] == nullptr || gradients[t]->dimension() != D)
        fail(operation,
             "the gradient of table " + std::to_string(t) + " must have rows of its dimension " + std::to_string(D));
    }
  }
  void check_bags(std::string_view operation, std::span<const embedding_bags> bags) const {
    const auto local = static_cast<std::size_t>(plan_.tables_of(rank()));
    if (bags.size() != local)
      fail(operation,
           "this rank owns " + std::to_string(local) + " tables; got " + std::to_string(bags.size()) + " bag sets");
    for (std::size_t t = 0; t < local; ++t)
      check_bags_shape(operation, bags[t], plan_.shape().global_batch, static_cast<int>(t), comm_->world_rank());
  }
  [[noreturn]] void fail(std::string_view operation, const std::string& detail) const {
    throw argument_error(comm_->world_rank(), operation, detail);
  }

  Comm* comm_;
  embedding_options options_;
  backend_type backend_;
  embedding_plan plan_;  // after backend_: the automatic order depends on its deliveries
  done_bitmask done_;    // per slice of this rank's order, a bit per row; marked by this rank's thread alone
  slice_exchange<T, backend_type> outputs_;                   // every rank's two outputs and their flags
  std::optional<slice_exchange<T, backend_type>> gradients_;  // every rank's two gradient buffers: backward_exchange()
  // On huge pages when large (core/reused_buffer.hpp), as the outputs are: the baseline pools into the
  // send buffer a row per sample, this rank's tables' width apart.
  reused_buffer<T> send_buffer_, receive_buffer_;
  bool fuses_ = true, fuses_backward_ = true;
  std::optional<path_trial> trial_, backward_trial_;
  // The fused path's kinds of stores, then the baseline's: whether it streams, or the trial choosing.
  struct row_stores_choice {
    bool streams = true;
    std::optional<path_trial> trial;
  };
  std::array<row_stores_choice, 2> row_stores_;  // path::fused's, path::baseline's
  [[nodiscard]] static constexpr std::size_t row_stores_slot(path which) noexcept {
    return which == path::fused ? 0 : 1;
  }
};

}  // namespace shardwise::fused
