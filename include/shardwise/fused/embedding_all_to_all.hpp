#pragma once
// Embedding-bag + all-to-all, fused (Punniyamurthy, Beckmann, Hamidouche: GPU-initiated fine-grained
// overlap of collective communication with computation).
//
// Embedding tables are split table-wise over the ranks; each rank pools (sum or mean, over bags of any
// length given as offsets + indices, as PyTorch's EmbeddingBag) every row of the global batch for its
// own tables, and the result is redistributed to the data-parallel batch split: rank d ends with
// {local batch, tables × dimension} (who holds what: fused/embedding_plan.hpp).
//
//   baseline()  pool everything, then one all_to_all_v, then unpack into the output layout
//   fused()     pool slice by slice; the task that completes a slice's done-bitmask sends the slice and
//               raises its ready flag at the destination; other ranks' slices first (of every table
//               where slices travel, of each table where all are stored in place; or oblivious for
//               comparison: fused/embedding_plan.hpp); each rank then waits for its incoming slices
//   operator()  fused() when the cost model predicts a gain, else baseline() ("never worse"); without a
//               machine model (threads, MPI) it measures instead: its first calls alternate the two
//               paths, then every rank keeps the one whose slowest rank was faster
// Both give bitwise the same output (each row is pooled by the same code in the same order).
//
// Per backend:
//   threads,  real concurrent code: the output lives in a symmetric window over the ranks that share
//   MPI       memory (comm/shared/symmetric_window.hpp; for MPI the ranks of a node, in an MPI-3 shared-memory
//             window, comm/shared_memory.hpp), so a rank pools straight into those peers' outputs (zero
//             copy) and raises their epoch flags (comm/shared/epoch_flags.hpp); waits block, with a timeout.
//             Slices for the other ranks (MPI ranks on other nodes, or every rank with share_memory
//             off) travel as non-blocking messages: receives posted up front, each slice sent when done
//   sim_gpu   the same data movement, and time from the models: a persistent kernel on the
//             communicator's stream (sim/persistent_kernel.hpp) whose puts and flags share the network
//             (sim/message_queue.hpp); peers in another node get the slice by put from a staging
//             buffer, peers in the node by zero-copy stores; workgroup and link tracks in the timeline
//
// Ready flags hold the call's epoch, so a signal from an earlier call never satisfies a later one and
// nothing is reset between calls except the done-bitmasks, which the completing task clears. Each rank
// has two outputs, used by turns: a peer stores call e's results into the one that holds call e - 2's
// only after the owner has entered call e - 1 (flag 0), so a result stays valid until its owner calls
// again; a peer that received slices from the owner in call e - 1 finds the flag raised already.
#include <Eigen/Core>

#include <algorithm>
#include <array>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "shardwise/comm/communicator.hpp"
#include "shardwise/comm/shared/done_bitmask.hpp"
#include "shardwise/comm/shared/symmetric_window.hpp"
#include "shardwise/comm/threads.hpp"
#include "shardwise/core/error.hpp"
#include "shardwise/fused/embedding_cost.hpp"
#include "shardwise/fused/embedding_plan.hpp"
#include "shardwise/sim/gpu_initiated_model.hpp"
#include "shardwise/sim/machine.hpp"
#include "shardwise/sim/message_queue.hpp"
#include "shardwise/sim/persistent_kernel.hpp"
#include "shardwise/sim/sim_gpu.hpp"

namespace shardwise::fused {

enum class pooling { sum, mean };
enum class path { automatic, fused, baseline };

// One table's lookups for the whole global batch: bag b is indices[offsets[b] .. offsets[b + 1]).
struct embedding_bags {
  std::span<const std::int64_t> offsets;  // global batch + 1 entries, non-decreasing
  std::span<const std::int64_t> indices;
};

// embedding_options::slice_rows: a number of embeddings per slice, or automatic_slice_rows (the
// default) to let the operator choose the size from its machine model (best_slice_rows in
// fused/embedding_cost.hpp; without a model it takes the paper's inter-node runs' 32).
inline constexpr std::int64_t paper_slice_rows = 32;
inline constexpr std::int64_t automatic_slice_rows = 0;

struct embedding_options {
  std::int64_t slice_rows = automatic_slice_rows;  // or embeddings per slice
  // automatic: communication_aware where slices travel (messages, sim_gpu), table_by_table where they
  // are stored straight into the peer's output (threads, MPI on one node: 10% faster at batch 1024 × 64
  // tables on threads, where the communication-aware order came back to every table after it had left
  // the cache).
  slice_order order = slice_order::automatic;
  fused::pooling pooling = pooling::sum;
  path choice = path::automatic;
  std::chrono::duration<double> timeout = std::chrono::seconds(60);  // for any one call's waits
  // fused() pools straight into the outputs of the peers whose memory this rank reaches (threads; MPI
  // ranks on its node, through an MPI-3 shared-memory window) and raises their flags, and sends slices to
  // the others as messages; false sends every slice as a message (on threads too). sim_gpu always stores
  // or puts: its model is of GPU-initiated stores and puts.
  bool share_memory = true;
  // More than 0: only groups of this many consecutive ranks share memory, as if each group were a node,
  // so one machine runs the path of several (stores within a group, messages between groups) to test or
  // measure it, as MPICH's MPIR_CVAR_NUM_CLIQUES does for its hierarchical collectives. Not on sim_gpu,
  // whose machine model says where its nodes are.
  int ranks_per_node = 0;
  sim::gpu_initiated_model gpu_initiated{};
  // The machine operator() decides on (sim_gpu: its own); without one it always fuses.
  std::optional<sim::machine> machine;
  // Bag length the decision assumes: 1 is conservative (pooling is what fusing hides, so a gain with
  // the least of it holds with more).
  std::int64_t expected_bag_length = 1;
};

namespace detail {

template <class Comm>
inline constexpr bool simulated = std::same_as<Comm, sim_gpu::communicator>;

// Asks for the cache lines of one table row (a hint: no effect on results).
inline void prefetch_row(const float* row, std::size_t floats) {
#if defined(__GNUC__)
  constexpr std::size_t floats_per_line = 64 / sizeof(float);
  for (std::size_t at = 0; at < floats; at += floats_per_line) __builtin_prefetch(row + at);
#else
  (void)row, (void)floats;
#endif
}

// Pools bag `row` of one table into out[0, D), each element summed in lookup order (so the bits are the
// serial loop's). The row is summed in blocks of `block` floats held in registers across the bag's
// rows, then stored once: summing row by row into `out` loaded and stored the output once per lookup
// and took 1.6-1.8x the time on one thread. Through Eigen's fixed-size arrays this is vectorised at
// -O2 too (GCC vectorises the plain loop only at -O3).
inline void pool_bag(std::span<const float> table, int dimension, const embedding_bags& bags, std::int64_t row,
                     pooling how, float* out, int rank) {
  constexpr int block = 32;
  const auto D = static_cast<std::size_t>(dimension);
  const std::int64_t table_rows = static_cast<std::int64_t>(table.size() / D);
  const auto begin = bags.offsets[static_cast<std::size_t>(row)], end = bags.offsets[static_cast<std::size_t>(row) + 1];
  const auto index_at = [&](std::int64_t i) { return bags.indices[static_cast<std::size_t>(i)]; };
  const auto row_of = [&](std::int64_t index) { return table.data() + static_cast<std::size_t>(index) * D; };
  // The bag's rows are random rows of a table in memory: asking for all of them before the sum lets
  // their loads overlap, where the sum alone keeps only a row or two in flight (pooling took half the
  // time with this, on both paths).
  for (auto i = begin; i < end; ++i) {
    const auto index = index_at(i);
    if (index < 0 || index >= table_rows)
      throw argument_error(rank, "embedding_all_to_all",
                           "index " + std::to_string(index) + " (bag " + std::to_string(row) + ") is outside a table of " +
                               std::to_string(table_rows) + " rows");
    prefetch_row(row_of(index), D);
  }
  // Both paths pool a table's bags in turn, so the next bag's rows (its first 16) are asked for too:
  // they arrive while this bag is summed.
  if (static_cast<std::size_t>(row) + 2 < bags.offsets.size())
    for (auto i = end; i < std::min(end + 16, bags.offsets[static_cast<std::size_t>(row) + 2]); ++i)
      if (index_at(i) >= 0 && index_at(i) < table_rows) prefetch_row(row_of(index_at(i)), D);
  // Columns [at, at + columns) of the bag's sum into out; `Array` is a block in registers (or, for the
  // last columns of a dimension that is not a multiple of `block`, on the stack).
  const auto pool_columns = [&]<class Array>(std::type_identity<Array>, std::size_t at, Eigen::Index columns) {
    Array sum = Array::Zero(columns);
    for (auto i = begin; i < end; ++i) sum += Eigen::Map<const Array>(row_of(index_at(i)) + at, columns);
    if (how == pooling::mean && end > begin) sum /= static_cast<float>(end - begin);
    Eigen::Map<Array>(out + at, columns) = sum;
  };
  std::size_t at = 0;
  for (; at + block <= D; at += block) pool_columns(std::type_identity<Eigen::Array<float, block, 1>>{}, at, block);
  if (at < D)
    pool_columns(std::type_identity<Eigen::Array<float, Eigen::Dynamic, 1, 0, block, 1>>{}, at,
                 static_cast<Eigen::Index>(D - at));
}

inline std::int64_t lookups(const embedding_bags& bags, std::int64_t row) {
  return bags.offsets[static_cast<std::size_t>(row) + 1] - bags.offsets[static_cast<std::size_t>(row)];
}

}  // namespace detail

template <communicator Comm>
class embedding_all_to_all {
  static constexpr bool simulated = detail::simulated<Comm>;
  using data_communicator_type = std::conditional_t<simulated, threads::communicator, Comm>;
  static constexpr std::string_view name = "embedding_all_to_all";
  static constexpr int slice_tag = 0x6e6d;

 public:
  // Collective: every rank constructs it with the same shape and options.
  embedding_all_to_all(Comm& comm, embedding_shape shape, embedding_options options = {})
      : comm_(&comm), options_(std::move(options)), groups_(groups_of(comm)),
        plan_(shape, comm.size(), chosen_slice_rows(shape), order(), comm.world_rank()),
        done_(plan_.tasks_per_slice(comm.rank()), tasks_run::on_one_thread),
        group_(data_communicator().split(groups_[static_cast<std::size_t>(comm.rank())], comm.rank())) {
    for (int p = 0, in_group = 0; p < comm.size(); ++p)
      group_rank_.push_back(groups_[static_cast<std::size_t>(p)] == groups_[static_cast<std::size_t>(rank())] ? in_group++ : -1);
    auto window = symmetric_window<float>::create(
        group_, outputs * output_floats(rank()), plan_.flags_at(rank()));
    if (!window) throw error(comm.world_rank(), name, "the ranks of a group share memory, but mapping it failed");
    window_.emplace(std::move(*window));
    if constexpr (simulated) {
      devices_.resize(static_cast<std::size_t>(comm.size()));
      const int mine = comm.world_rank();
      data_communicator().all_gather(std::span<const int>(&mine, 1), devices_);
    }
    if (options_.choice == path::automatic && !has_machine()) trial_.emplace();
    else fuses_ = decide();
  }
  embedding_all_to_all(const embedding_all_to_all&) = delete;
  embedding_all_to_all& operator=(const embedding_all_to_all&) = delete;

  [[nodiscard]] const embedding_plan& plan() const noexcept { return plan_; }
  // Whether fused() stores the slices for `peer` straight into its output (its own always; else they
  // leave as messages, or on sim_gpu as puts from a staging buffer to another node).
  [[nodiscard]] bool stores_in_place(int peer) const {
    if (peer < 0 || peer >= comm_->size())
      throw argument_error(comm_->world_rank(), "embedding_all_to_all::stores_in_place",
                           "peer " + std::to_string(peer) + " is not one of the " + std::to_string(comm_->size()) + " ranks");
    return delivery_to(peer) == delivery::store;
  }
  // Whether operator() takes the fused path (while it is still measuring, the path of its next call).
  [[nodiscard]] bool fuses() const noexcept { return trial_ ? trial_->calls % 2 == 0 : fuses_; }
  // Whether operator() is still timing both paths (path::automatic without a machine model).
  [[nodiscard]] bool measuring() const noexcept { return trial_.has_value(); }
  // When it measures, operator() times each path at least least_trial_calls and at most most_trial_calls
  // times: more while the trial has taken less than trial_time (calls of a few milliseconds vary by
  // more than the two paths differ, so two of each chose the slower path now and then).
  static constexpr int least_trial_calls = 2;
  static constexpr int most_trial_calls = 8;
  static constexpr std::chrono::duration<double> trial_time = std::chrono::milliseconds(50);
  // Calls made so far (the epoch the last fused call's flags carry).
  [[nodiscard]] std::uint64_t epoch() const noexcept { return epoch_; }

  // `tables`: this rank's tables (plan().tables_of(rank), each rows × dimension floats, row-major);
  // `bags`: their lookups for the global batch. Returns this rank's output {local batch, tables ×
  // dimension}, valid until this rank's next call.
  std::span<const float> operator()(std::span<const std::span<const float>> tables, std::span<const embedding_bags> bags) {
    if (!trial_) return fuses_ ? fused(tables, bags) : baseline(tables, bags);
    // Fused, baseline, fused, …; the first call of each also pays its buffers' first touch, so each path
    // keeps its fastest call. A call's time is its slowest rank's from a common start: timed from each
    // rank's own entry, a call would also count the peers' tail of the previous call of the other path
    // (the trial then took the baseline where fusing was twice as fast).
    comm_->barrier();
    const bool fuse = fuses();
    const auto start = std::chrono::steady_clock::now();
    const auto out = fuse ? fused(tables, bags) : baseline(tables, bags);
    auto& seconds = trial_->seconds;
    seconds[static_cast<std::size_t>(trial_->calls)] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const int calls = ++trial_->calls;
    if (calls % 2 != 0 || calls < 2 * least_trial_calls) return out;
    // Every rank decides from the same reduced times, so all stop, and choose, together.
    auto slowest = seconds;
    comm_->all_reduce(std::span<double>(slowest.data(), static_cast<std::size_t>(calls)), op::max);
    std::array<double, 2> fastest{std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()};
    double spent = 0;
    for (int call = 0; call < calls; ++call) {
      auto& best = fastest[static_cast<std::size_t>(call % 2)];
      best = std::min(best, slowest[static_cast<std::size_t>(call)]);
      spent += slowest[static_cast<std::size_t>(call)];
    }
    if (spent < trial_time.count() && calls < 2 * most_trial_calls) return out;
    fuses_ = fastest[0] <= fastest[1];
    trial_.reset();
    return out;
  }

  std::span<const float> baseline(std::span<const std::span<const float>> tables, std::span<const embedding_bags> bags) {
    begin_call(tables, bags);
    const int P = comm_->size(), r = rank(), D = plan_.shape().dimension;
    const int local_tables = plan_.tables_of(r);
    // Pooled blocks by destination: {rows of d, local tables, D}.
    std::vector<int> send_counts, receive_counts;
    for (int d = 0; d < P; ++d) {
      send_counts.push_back(static_cast<int>(plan_.block_floats(r, d)));
      receive_counts.push_back(static_cast<int>(plan_.block_floats(d, r)));
    }
    const auto pooled = kept(send_buffer_, total(send_counts)), received = kept(receive_buffer_, total(receive_counts));
    for (int t = 0; t < local_tables; ++t) {
      const auto& table = tables[static_cast<std::size_t>(t)];
      const auto& bag = bags[static_cast<std::size_t>(t)];
      std::optional<sim::persistent_kernel> kernel;
      double start = 0;
      if constexpr (simulated) {
        start = comm_->stream().available();
        kernel.emplace(comm_->world_rank(), machine().device, options_.gpu_initiated,
                       static_cast<int>(std::min<std::int64_t>(plan_.shape().global_batch, options_.gpu_initiated.resident_workgroups)),
                       start + machine().device.launch_latency);
      }
      std::size_t block = 0;
      for (int d = 0; d < P; ++d) {
        for (std::int64_t row = plan_.first_row(d); row < plan_.first_row(d + 1); ++row) {
          const auto at = block + static_cast<std::size_t>(((row - plan_.first_row(d)) * local_tables + t) * D);
          detail::pool_bag(table, D, bag, row, options_.pooling, pooled.data() + at, comm_->world_rank());
          if (kernel) kernel->run_task(pooling_work(detail::lookups(bag, row), D));
        }
        block += static_cast<std::size_t>(send_counts[static_cast<std::size_t>(d)]);
      }
      if constexpr (simulated)
        comm_->stream().occupy("pooling, table " + std::to_string(plan_.first_table(r) + t), start, kernel->finish({}, {}));
    }
    comm_->all_to_all_v(pooled, send_counts, received, receive_counts);
    // Unpack: the block from s is {local rows, tables of s, D}; its tables sit at columns first_table(s)·D.
    auto out = output();
    std::size_t from = 0;
    for (int s = 0; s < P; ++s)
      for (std::int64_t row = 0; row < plan_.rows_of(r); ++row) {
        const auto width = static_cast<std::size_t>(plan_.tables_of(s) * D);
        std::copy_n(received.begin() + static_cast<std::ptrdiff_t>(from), width,
                    out.begin() + plan_.output_offset(r, plan_.first_table(s), plan_.first_row(r) + row));
        from += width;
      }
    if constexpr (simulated) {
      const std::string kernel_name = "unpack all-to-all";  // an lvalue: the untimed launch overload
      comm_->stream().launch(unpack_work(plan_, r), kernel_name);
      comm_->stream().synchronize();
    }
    return out;
  }

  std::span<const float> fused(std::span<const std::span<const float>> tables, std::span<const embedding_bags> bags) {
    begin_call(tables, bags);
    auto& window = *window_;
    const int P = comm_->size(), r = rank(), D = plan_.shape().dimension;
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(options_.timeout);
    // Slices from outside the group: receives posted up front in each sender's order (messages between
    // two ranks with one tag match in order), unpacked at the end.
    struct arriving {
      embedding_slice slice;
      std::size_t at;
    };
    std::vector<arriving> incoming;
    std::size_t received_floats = 0;
    for (int s = 0; s < P; ++s)
      if (delivery_to(s) == delivery::message)
        for (const auto& slice : plan_.slices(s))
          if (slice.destination == r) {
            incoming.push_back({slice, received_floats});
            received_floats += static_cast<std::size_t>(slice.rows * D);
          }
    const auto received = kept(receive_buffer_, received_floats);
    std::vector<typename Comm::request> receives, sends;
    for (const auto& a : incoming)
      receives.push_back(comm_->irecv(std::span<float>(received.data() + a.at, static_cast<std::size_t>(a.slice.rows * D)),
                                      owner_of(a.slice.table), slice_tag));
    // Slices that leave through a buffer (messages, puts): each its own range, kept until it has left.
    std::size_t leaving = 0;
    for (int d = 0; d < P; ++d)
      if (delivery_to(d) != delivery::store) leaving += static_cast<std::size_t>(plan_.block_floats(r, d));
    const auto sending = kept(send_buffer_, leaving);
    std::vector<char> entered(static_cast<std::size_t>(P), 0);
    std::optional<fused_kernel_model> model;
    if constexpr (simulated)
      model.emplace(plan_, comm_->world_rank(), machine(), options_.gpu_initiated, comm_->stream().available(),
                    comm_->timeline());
    std::size_t next = 0, at = 0;
    plan_.for_each_task(r, [&](std::size_t s, const embedding_slice& slice, std::int64_t task, std::int64_t row) {
      const int d = slice.destination;
      const auto how = delivery_to(d);
      // The peer's output this call stores into holds its result of call epoch_ - 2 until it enters
      // call epoch_ - 1 (if it sent this rank slices in that call, it has).
      if (how != delivery::message && !entered[static_cast<std::size_t>(d)]) {
        window.peer_flags(group_rank(d)).wait_or_throw(0, epoch_ - 1, deadline, comm_->world_rank(), name, [&] {
          return "rank " + std::to_string(d) + " to enter call " + std::to_string(epoch_ - 1) + " and free its output";
        });
        entered[static_cast<std::size_t>(d)] = 1;
      }
      if (how != delivery::store && task == 0) {
        at = next;
        next += static_cast<std::size_t>(slice.rows * D);
      }
      const int t = slice.table - plan_.first_table(r);
      const auto& bag = bags[static_cast<std::size_t>(t)];
      float* out = how == delivery::store
                       ? window.peer_buffer(group_rank(d)).data() + output_at(d) + plan_.output_offset(d, slice.table, row)
                       : sending.data() + at + static_cast<std::size_t>(task * D);
      detail::pool_bag(tables[static_cast<std::size_t>(t)], D, bag, row, options_.pooling, out, comm_->world_rank());
      if (model) model->task(slice, task, detail::lookups(bag, row));
      // The task that fills the done-bitmask sends the slice, or raises its flag where it was stored.
      if (!done_.complete(s, task)) return;
      if (how != delivery::store) {
        const std::span<const float> pooled(sending.data() + at, static_cast<std::size_t>(slice.rows * D));
        if (how == delivery::message) {
          sends.push_back(comm_->isend(pooled, d, slice_tag));
          return;
        }
        for (std::int64_t i = 0; i < slice.rows; ++i)
          window.put(group_rank(d),
                     output_at(d) + static_cast<std::size_t>(plan_.output_offset(d, slice.table, slice.first_row + i)),
                     pooled.subspan(static_cast<std::size_t>(i * D), static_cast<std::size_t>(D)));
      }
      window.fence();
      window.signal(group_rank(d), slice.flag, epoch_);
    });
    const auto per_table = static_cast<std::size_t>(plan_.slices_to(r));
    for (std::size_t f = 1; f < plan_.flags_at(r); ++f) {
      const auto table = static_cast<int>((f - 1) / per_table);
      if (delivery_to(owner_of(table)) == delivery::message) continue;
      window.flags().wait_or_throw(f, epoch_, deadline, comm_->world_rank(), name, [&] {
        return "slice " + std::to_string((f - 1) % per_table) + " of table " + std::to_string(table) + " from rank " +
               std::to_string(owner_of(table));
      });
    }
    for (auto& request : receives) request.wait();
    auto out = output();
    for (const auto& a : incoming)
      for (std::int64_t row = 0; row < a.slice.rows; ++row)
        std::copy_n(received.begin() + static_cast<std::ptrdiff_t>(a.at + static_cast<std::size_t>(row * D)), D,
                    out.begin() + plan_.output_offset(r, a.slice.table, a.slice.first_row + row));
    for (auto& request : sends) request.wait();
    if constexpr (simulated) finish_model(*model);
    return out;
  }

 private:
  [[nodiscard]] int rank() const { return comm_->rank(); }
  // Each rank's window holds two outputs, call e's the one of e's parity (see the top of this file).
  static constexpr std::size_t outputs = 2;
  [[nodiscard]] std::size_t output_floats(int peer) const {
    return static_cast<std::size_t>(plan_.output_floats(peer));
  }
  // Where the output of `peer` for this call begins in its block of the window.
  [[nodiscard]] std::size_t output_at(int peer) const { return (epoch_ % outputs) * output_floats(peer); }
  [[nodiscard]] std::span<float> output() { return window_->local().subspan(output_at(rank()), output_floats(rank())); }
  // Both paths start so: the inputs checked, the call numbered, and the group told (flag 0) that this
  // rank has entered it, so its output of the call before the last may be overwritten.
  void begin_call(std::span<const std::span<const float>> tables, std::span<const embedding_bags> bags) {
    check(tables, bags);
    ++epoch_;
    window_->flags().raise(0, epoch_);
  }
  // The communicator the window and the model's bookkeeping use (sim_gpu: untimed).
  data_communicator_type& data_communicator() {
    if constexpr (simulated) return comm_->untimed();
    else return *comm_;
  }
  const sim::machine& machine() const {
    if constexpr (simulated) return comm_->machine();
    else return *options_.machine;
  }
  // `floats` of a buffer kept across calls: allocating a large one per call costs page faults on every
  // call (on threads, more than the all-to-all itself).
  static std::span<float> kept(std::vector<float>& buffer, std::size_t floats) {
    if (buffer.size() < floats) buffer.resize(floats);
    return {buffer.data(), floats};
  }
  static std::size_t total(const std::vector<int>& counts) {
    std::size_t n = 0;
    for (const int c : counts) n += static_cast<std::size_t>(c);
    return n;
  }
  [[nodiscard]] int owner_of(int table) const {
    int r = 0;
    while (plan_.first_table(r + 1) <= table) ++r;
    return r;
  }

  // Per rank, the lowest rank of its group: the ranks whose outputs fused() stores into (collective).
  std::vector<int> groups_of(Comm& comm) const {
    const int P = comm.size(), k = options_.ranks_per_node;
    if (k < 0 || (simulated && k != 0))
      throw argument_error(comm.world_rank(), name,
                           "ranks_per_node is " + std::to_string(k) +
                               (simulated ? "; on sim_gpu the machine model says where the nodes are, so it must be 0"
                                          : "; it must be 0 (the backend's nodes) or more"));
    std::vector<int> groups(static_cast<std::size_t>(P));
    if (simulated) return groups;  // one window: its puts to other nodes are modelled, its data shared
    if (!options_.share_memory) {
      for (int p = 0; p < P; ++p) groups[static_cast<std::size_t>(p)] = p;
      return groups;
    }
    const auto memory = shared_memory_groups_of(comm);
    const auto with = [&](int p, int q) {
      return memory[static_cast<std::size_t>(p)] == memory[static_cast<std::size_t>(q)] && (k == 0 || p / k == q / k);
    };
    for (int p = 0; p < P; ++p) {
      int first = 0;
      while (!with(first, p)) ++first;
      groups[static_cast<std::size_t>(p)] = first;
    }
    return groups;
  }
  [[nodiscard]] int group_rank(int peer) const { return group_rank_[static_cast<std::size_t>(peer)]; }

  // How fused() hands a slice to `peer`.
  enum class delivery { store, put, message };
  [[nodiscard]] delivery delivery_to(int peer) const {
    if (groups_[static_cast<std::size_t>(peer)] != groups_[static_cast<std::size_t>(rank())]) return delivery::message;
    return stages(peer) ? delivery::put : delivery::store;
  }

  [[nodiscard]] slice_order order() const {
    if (options_.order != slice_order::automatic) return options_.order;
    const bool stores_everywhere = std::all_of(groups_.begin(), groups_.end(), [](int group) { return group == 0; });
    return stores_everywhere && !simulated ? slice_order::table_by_table : slice_order::communication_aware;
  }
  [[nodiscard]] bool has_machine() const { return simulated || options_.machine.has_value(); }
  [[nodiscard]] std::int64_t expected_bag_length() const { return std::max<std::int64_t>(1, options_.expected_bag_length); }

  [[nodiscard]] std::int64_t chosen_slice_rows(const embedding_shape& shape) const {
    if (options_.slice_rows != automatic_slice_rows) return options_.slice_rows;
    if (!has_machine()) return paper_slice_rows;
    return best_slice_rows(shape, comm_->size(), order(), machine(), options_.gpu_initiated, expected_bag_length())
        .rows;
  }

  // The path the options or the machine model choose (without either, operator() measures: trial_).
  bool decide() const {
    if (options_.choice != path::automatic) return options_.choice == path::fused;
    const auto times = predict(plan_, machine(), options_.gpu_initiated, expected_bag_length());
    return times.fused <= times.baseline;
  }

  void check(std::span<const std::span<const float>> tables, std::span<const embedding_bags> bags) const {
    const auto local = static_cast<std::size_t>(plan_.tables_of(rank()));
    const auto D = static_cast<std::size_t>(plan_.shape().dimension);
    const auto B = static_cast<std::size_t>(plan_.shape().global_batch);
    auto fail = [&](const std::string& detail) { throw argument_error(comm_->world_rank(), name, detail); };
    if (tables.size() != local || bags.size() != local)
      fail("this rank owns " + std::to_string(local) + " tables; got " + std::to_string(tables.size()) + " tables and " +
           std::to_string(bags.size()) + " bag sets");
    for (std::size_t t = 0; t < local; ++t) {
      if (tables[t].size() % D != 0)
        fail("table " + std::to_string(t) + " has " + std::to_string(tables[t].size()) +
             " floats, not a multiple of the dimension " + std::to_string(D));
      const auto& o = bags[t].offsets;
      if (o.size() != B + 1 || o.front() != 0 || !std::is_sorted(o.begin(), o.end()) ||
          o.back() > static_cast<std::int64_t>(bags[t].indices.size()))
        fail("the offsets of table " + std::to_string(t) + " must be " + std::to_string(B + 1) +
             " non-decreasing entries from 0 to at most the " + std::to_string(bags[t].indices.size()) + " indices");
    }
  }

  // sim_gpu: whether slices for `peer` go through a staging buffer and a put (another node).
  [[nodiscard]] bool stages(int peer) const {
    if constexpr (simulated)
      return sim::crosses_nodes(machine().network, devices_[static_cast<std::size_t>(rank())],
                                devices_[static_cast<std::size_t>(peer)]);
    else
      return false;
  }

  // Every rank's messages to every rank (untimed), delivered together; the kernel holds the stream
  // until its end and the host waits for it, as the baseline's blocking all-to-all does.
  void finish_model(fused_kernel_model& model) {
    constexpr std::size_t fields = 7;
    std::vector<double> mine;
    for (const auto& m : model.kernel().messages())
      mine.insert(mine.end(), {static_cast<double>(m.sent.source), static_cast<double>(m.sent.destination), m.sent.bytes,
                               m.sent.issued, static_cast<double>(m.workgroup), static_cast<double>(m.fences_before),
                               static_cast<double>(m.flag)});
    auto& data = data_communicator();
    const int P = data.size();
    const int count = static_cast<int>(mine.size());
    std::vector<int> counts(static_cast<std::size_t>(P));
    data.all_gather(std::span<const int>(&count, 1), counts);
    std::vector<double> repeated;
    for (int p = 0; p < P; ++p) repeated.insert(repeated.end(), mine.begin(), mine.end());
    std::vector<double> everyone(total(counts));
    data.all_to_all_v(repeated, std::vector<int>(static_cast<std::size_t>(P), count), everyone, counts);
    std::vector<sim::gpu_message> all;
    for (std::size_t i = 0; i < everyone.size(); i += fields)
      all.push_back({{static_cast<int>(everyone[i]), static_cast<int>(everyone[i + 1]), everyone[i + 2], everyone[i + 3]},
                     static_cast<int>(everyone[i + 4]), static_cast<int>(everyone[i + 5]),
                     static_cast<std::int64_t>(everyone[i + 6])});
    // Links are drawn once, by rank 0.
    const auto arrivals = sim::deliver_all(machine().network, all, options_.gpu_initiated.message_overhead,
                                           rank() == 0 ? comm_->timeline() : nullptr);
    const double start = comm_->stream().available();
    const double end = model.kernel().finish(all, arrivals);
    comm_->stream().occupy("fused embedding + all-to-all", start, end,
                           {{"slice rows", std::to_string(plan_.slice_rows())},
                            {"order", std::string(name_of(plan_.order()))}});
    comm_->stream().synchronize();
  }

  Comm* comm_;
  embedding_options options_;
  std::vector<int> groups_;  // groups_of(); before plan_: the automatic order depends on it
  embedding_plan plan_;
  done_bitmask done_;  // per slice of this rank's order, a bit per row; marked by this rank's thread alone
  data_communicator_type group_;  // the ranks of this rank's group
  std::vector<int> group_rank_;   // each rank's rank in group_, or -1
  std::optional<symmetric_window<float>> window_;  // over group_: every output and flag of the group
  std::vector<int> devices_;  // device (world rank) of each rank
  std::vector<float> send_buffer_, receive_buffer_;  // for kept()
  std::uint64_t epoch_ = 0;
  bool fuses_ = true;
  struct trial {
    std::array<double, 2 * most_trial_calls> seconds{};  // this rank's trial calls: fused, baseline, fused, …
    int calls = 0;
  };
  std::optional<trial> trial_;
};

}  // namespace shardwise::fused
