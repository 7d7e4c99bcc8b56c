#pragma once
// The simulated GPU backend: `sim_gpu::run(P, machine, body)` runs P simulated GPUs with real data
// and virtual time. It lives in sim/, not comm/, because it is where the runtime's data movement meets
// the models of time: it includes comm/ (the threads backend) and the models beside it, and comm/
// never includes sim/.
//
// Data. Every rank is a thread (threads::run) and every call moves its data through a
// threads::communicator held inside, so results are exactly the threads backend's.
// Time. Each rank drives one sim::device (host clock, streams; sim/device.hpp). A collective is
// issued on the communicator's stream (the device's default stream unless use_stream() says
// otherwise): it arrives on a rank when both that rank's host and the stream have reached it, starts
// once every member has arrived and this communicator's previous collective has ended, and lasts
// its modelled duration (sim/collective_cost.hpp: the algorithm's steps on the machine's network,
// beside those of the collectives of other communicators that the device is still running and that
// were priced before it, which happens when a rank learns a collective's end: at its wait).
// A blocking call returns with the host clock at its end; a started one moves the host clock on
// wait() or on a test() that reports completion. Kernels enqueued on a stream behind a started
// collective wait for it (and, in real time, for its data, which they may read).
// Sends and receives are host-driven: a message leaves when the sender's stream is free, takes its
// route's latency + bytes / bandwidth, and a receive completes at the later of its call and that. A
// message in flight holds no stream, so kernels go on while it travels; one that reads what arrived is
// launched after wait(), which has moved the host clock to the arrival.
// Kernels of operations (launch(): the local GEMMs of ops/) go on the device's compute stream, the
// default stream; the communicator's stream then waits for each, so what it sends or reduces later
// leaves after the kernel that wrote it. With collectives and messages on a stream of their own
// (use_stream), communication overlaps the kernels; on the default stream, started collectives hold
// the kernels behind them.
//
// Shapes only (execution::shapes_only): the same program, priced the same, without its values. Every
// rank still runs the program with its world rank (as a fiber: threads::ranks_as::fibers, since
// thousands of ranks then meet at every collective), so meshes, layouts and every layer run unchanged;
// kernels are launched and priced but do not compute; collectives and messages take the same virtual
// time and count the same traffic, but payloads of floating-point elements (float, double, bf16: the
// values) do not move, while integer payloads (counts, indices, plans: what steers the program) do
// (detail::moves_payload, the one place that decides). Element storage is allocated and counted but
// not zeroed or copied (core/element_memory.hpp).
//
// The timeline, when the machine records one, has a track per stream of every GPU (kernels and
// collectives, with the algorithm) and per network link (collectives drawn by rank 0 of each
// communicator, messages by their sender).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "shardwise/comm/communicator.hpp"
#include "shardwise/comm/detail/backend_hooks.hpp"
#include "shardwise/comm/threads.hpp"
#include "shardwise/comm/traffic.hpp"
#include "shardwise/core/element.hpp"
#include "shardwise/core/element_memory.hpp"
#include "shardwise/core/error.hpp"
#include "shardwise/sim/collective_cost.hpp"
#include "shardwise/sim/collectives_in_flight.hpp"
#include "shardwise/sim/device.hpp"
#include "shardwise/sim/machine.hpp"
#include "shardwise/sim/network.hpp"
#include "shardwise/sim/timeline.hpp"

namespace shardwise::sim_gpu {

// How a run executes the program: `full` computes every kernel and moves every payload (results are
// exact); `shapes_only` prices the same kernels and transfers without computing or moving values.
enum class execution { full, shapes_only };

namespace detail {

template <class Call>
struct element_of_call {
  using type = void;  // barrier: no payload
};
template <template <class> class Call, class T>
struct element_of_call<Call<T>> {
  using type = T;
};

// The rule of shapes-only runs, decided here alone: a payload moves unless it holds values, i.e.
// floating-point elements, which kernels that do not compute would neither produce nor read. Integers
// (counts, indices, plans) steer the program, so they move in every run.
template <class Call>
[[nodiscard]] constexpr bool moves_payload(execution mode) {
  using T = typename element_of_call<Call>::type;
  return mode == execution::full || !value_element<T>;
}

// What moves instead of a call whose payload does not: the same message without elements (so sends and
// receives still pair up), and for a collective a barrier (so its members still meet).
template <class T>
calls::send<T> without_payload(const calls::send<T>& call) {
  return {{}, call.destination, call.tag};
}
template <class T>
calls::recv<T> without_payload(const calls::recv<T>& call) {
  return {{}, call.source, call.tag};
}
template <class Call>
calls::barrier without_payload(const Call&) {
  return {};
}

// What the members posted for one collective: when each arrived, and for all_to_all_v what each sends.
struct board {
  std::vector<double> arrivals;
  std::vector<std::vector<double>> sent_bytes;
  int posted = 0;
  int unread = 0;
  std::optional<sim::collective_cost::choice> uneven;  // all_to_all_v's, priced once for all members
};

// What a member learns of a collective once all have posted.
struct posted_call {
  double last_arrival = 0;
  sim::collective_cost::choice uneven{};        // all_to_all_v only
  std::vector<std::vector<double>> sent_bytes;  // all_to_all_v, and only when asked for (timelines)
};

// The ranks of one communicator and what they post to each other about time.
struct group {
  group(std::vector<int> devices_of_members, int cost_id, std::int64_t unique_serial)
      : devices(std::move(devices_of_members)), id(cost_id), serial(unique_serial) {}
  const std::vector<int> devices;  // world rank = device, in communicator rank order
  const int id;                    // collective_cost's name for this set of devices
  const std::int64_t serial;       // this group object, among all of the run

  [[nodiscard]] int size() const noexcept { return static_cast<int>(devices.size()); }

  void post(std::uint64_t sequence, int rank, double arrival, std::vector<double> sent_bytes) {
    std::lock_guard lock(mutex_);
    auto& b = boards_[sequence];
    if (b.arrivals.empty()) {
      b.arrivals.assign(devices.size(), 0.0);
      b.sent_bytes.resize(devices.size());
      b.unread = size();
    }
    b.arrivals[static_cast<std::size_t>(rank)] = arrival;
    b.sent_bytes[static_cast<std::size_t>(rank)] = std::move(sent_bytes);
    ++b.posted;
  }
  // Called once per member after the collective's data movement completed, so all have posted. For an
  // all_to_all_v the first reader prices it (`price_uneven` of the matrix sent), once for the group:
  // each member pricing it again would cost P times one simulation of P² transfers.
  template <class PriceUneven>
  posted_call read(std::uint64_t sequence, int world_rank, std::string_view operation, bool uneven,
                   const PriceUneven& price_uneven, bool keep_sent_bytes) {
    std::lock_guard lock(mutex_);
    const auto found = boards_.find(sequence);
    if (found == boards_.end() || found->second.posted != size())
      throw peer_error(world_rank, operation, "not every member posted its arrival time");
    board& b = found->second;
    posted_call call{*std::max_element(b.arrivals.begin(), b.arrivals.end()), {}, {}};
    if (uneven) {
      if (!b.uneven) b.uneven = price_uneven(b.sent_bytes);
      call.uneven = *b.uneven;
      if (keep_sent_bytes) call.sent_bytes = b.sent_bytes;
    }
    if (--b.unread == 0) boards_.erase(found);
    return call;
  }

  // Point to point: when message (source, destination, tag, number) left its sender.
  void depart(std::tuple<int, int, int, std::uint64_t> message, double time) {
    std::lock_guard lock(mutex_);
    departures_[message] = time;
  }
  double departed(std::tuple<int, int, int, std::uint64_t> message) {
    std::lock_guard lock(mutex_);
    const auto found = departures_.find(message);
    const double time = found == departures_.end() ? 0.0 : found->second;
    if (found != departures_.end()) departures_.erase(found);
    return time;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<std::uint64_t, board> boards_;
  std::map<std::tuple<int, int, int, std::uint64_t>, double> departures_;
};

// One run: the machine, its devices, the shared cost cache and timeline, and the groups splits made.
struct machine_state {
  machine_state(int ranks, sim::machine machine_model, execution how)
      : model(std::move(machine_model)),
        mode(how),
        trace(model.record_timeline ? std::make_shared<sim::timeline>() : nullptr),
        costs(model),
        traffic(static_cast<std::size_t>(ranks)),
        in_flight(static_cast<std::size_t>(ranks)) {
    for (int r = 0; r < ranks; ++r) {
      devices.push_back(std::make_unique<sim::device>(r, model.device, trace.get()));
      memory.push_back(std::make_shared<element_memory>(how == execution::full));
    }
  }
  machine_state(const machine_state&) = delete;
  machine_state& operator=(const machine_state&) = delete;

  std::shared_ptr<group> make_group(std::vector<int> members) {
    const int id = costs.group_id(members);
    return std::make_shared<group>(std::move(members), id, next_serial++);
  }
  // The group a split makes, the same object for every member that asks with the same key.
  std::shared_ptr<group> split_group(std::tuple<std::int64_t, std::uint64_t, int> key,
                                     const std::vector<int>& members) {
    std::lock_guard lock(mutex);
    auto& made = splits[key];
    if (!made) made = make_group(members);
    return made;
  }

  const sim::machine model;
  const execution mode;
  const std::shared_ptr<sim::timeline> trace;
  sim::collective_cost costs;
  std::vector<std::unique_ptr<sim::device>> devices;
  std::vector<std::shared_ptr<element_memory>> memory;  // per device
  std::vector<traffic_count> traffic;                   // per device, each written by its rank's thread
  std::vector<sim::collectives_in_flight> in_flight;    // per device, each written by its rank's thread
  std::mutex mutex;
  std::atomic<std::int64_t> next_serial{0};
  std::map<std::tuple<std::int64_t, std::uint64_t, int>, std::shared_ptr<group>> splits;
};

// What the cost model needs of one call.
template <class T>
sim::collective_shape shape_of(const calls::all_reduce<T>& c, int) {
  return {sim::collective::all_reduce, static_cast<double>(c.in.size_bytes()), 0};
}
template <class T>
sim::collective_shape shape_of(const calls::reduce<T>& c, int) {
  return {sim::collective::reduce, static_cast<double>(c.in.size_bytes()), c.root};
}
template <class T>
sim::collective_shape shape_of(const calls::reduce_scatter<T>& c, int) {
  return {sim::collective::reduce_scatter, static_cast<double>(c.out.size_bytes()), 0};
}
template <class T>
sim::collective_shape shape_of(const calls::all_gather<T>& c, int) {
  return {sim::collective::all_gather, static_cast<double>(c.in.size_bytes()), 0};
}
template <class T>
sim::collective_shape shape_of(const calls::all_to_all<T>& c, int ranks) {
  return {sim::collective::all_to_all, static_cast<double>(c.in.size_bytes()) / ranks, 0};
}
template <class T>
sim::collective_shape shape_of(const calls::all_to_all_v<T>&, int) {
  return {sim::collective::all_to_all_v, 0, 0};
}
template <class T>
sim::collective_shape shape_of(const calls::broadcast<T>& c, int) {
  return {sim::collective::broadcast, static_cast<double>(c.data.size_bytes()), c.root};
}
inline sim::collective_shape shape_of(const calls::barrier&, int) { return {sim::collective::barrier, 0, 0}; }

template <class Call>
std::vector<double> sent_bytes_of(const Call&) {
  return {};
}
template <class T>
std::vector<double> sent_bytes_of(const calls::all_to_all_v<T>& c) {
  std::vector<double> bytes;
  for (const int count : c.send_counts) bytes.push_back(static_cast<double>(count) * sizeof(T));
  return bytes;
}

// One rank's clock for one communicator: numbers its collectives, and learns their ends in order.
class rank_clock {
 public:
  rank_clock(std::shared_ptr<machine_state> machine, std::shared_ptr<group> members, int rank, sim::stream& on)
      : machine_(std::move(machine)),
        members_(std::move(members)),
        rank_(rank),
        device_(machine_->devices[static_cast<std::size_t>(world_rank())].get()),
        stream_(&on) {}

  [[nodiscard]] int world_rank() const { return members_->devices[static_cast<std::size_t>(rank_)]; }
  [[nodiscard]] sim::device& device() const noexcept { return *device_; }
  [[nodiscard]] sim::stream& stream() const noexcept { return *stream_; }
  void use_stream(sim::stream& s) noexcept { stream_ = &s; }
  [[nodiscard]] const std::shared_ptr<machine_state>& machine() const noexcept { return machine_; }
  [[nodiscard]] const std::shared_ptr<group>& members() const noexcept { return members_; }

  // When a collective or a message issued now could leave: once the stream is free and every operation's
  // kernel launched before it has ended, over whichever communicator, since it may carry that kernel's
  // result (as PyTorch makes a process group's stream wait for the compute stream before each collective
  // and send). Kernels a program puts on streams itself are ordered by its own events.
  [[nodiscard]] double departure() const { return std::max(stream_->available(), device_->operations_done().time); }

  // Numbers a collective and posts this rank's arrival; the data movement comes next.
  std::uint64_t issue(const sim::collective_shape& shape, std::string name, std::vector<double> sent_bytes) {
    const std::uint64_t sequence = next_++;
    members_->post(sequence, rank_, departure(), std::move(sent_bytes));
    unsettled_.emplace(sequence, entry{shape, std::move(name), stream_});
    return sequence;
  }

  // The end of collective `sequence` (its data movement has completed), and of all before it.
  double end_of(std::uint64_t sequence) {
    for (; settled_ <= sequence; ++settled_) settle(settled_);
    const auto found = ends_.find(sequence);
    const double end = found->second;
    ends_.erase(found);
    return end;
  }

  // Point to point: the next message number for (peer, tag) in one direction.
  std::uint64_t next_message(bool sending, int peer, int tag) { return (sending ? sent_ : received_)[{peer, tag}]++; }
  // Latency + bytes / bandwidth on the route between two members, alone on it. With `drawn_from` its
  // links' busy intervals go on the timeline from that time, when the machine records one.
  double transfer_time(int from, int to, double bytes, std::optional<double> drawn_from = {}) const {
    const std::vector<sim::step> message{{{{from, to, bytes}}}};
    sim::timeline* const trace = drawn_from ? machine_->trace.get() : nullptr;
    return machine_->costs.play({members_->devices}, message, trace, drawn_from.value_or(0));
  }

 private:
  struct entry {
    sim::collective_shape shape;
    std::string name;
    sim::stream* on;
  };

  void settle(std::uint64_t sequence) {
    auto node = unsettled_.extract(sequence);
    const entry& e = node.mapped();
    auto& costs = machine_->costs;
    const bool uneven = e.shape.kind == sim::collective::all_to_all_v;
    const bool drawn = rank_ == 0 && machine_->trace;
    const posted_call call = members_->read(
        sequence, world_rank(), e.name, uneven,
        [&](const std::vector<std::vector<double>>& sent) { return costs.choose(members_->devices, sent); }, drawn);
    const double start = std::max(last_end_, call.last_arrival);
    const sim::collective_cost::choice how =
        uneven ? call.uneven : costs.choose(members_->id, members_->devices, e.shape);
    sim::collectives_in_flight& beside = machine_->in_flight[static_cast<std::size_t>(world_rank())];
    last_end_ =
        start + (uneven ? how.seconds
                        : costs.duration_beside(members_->id, members_->devices, e.shape, start, beside.recent()));
    if (!uneven && e.shape.bytes > 0) beside.add({members_->id, e.shape, start, last_end_});
    ends_[sequence] = last_end_;
    e.on->occupy(e.name, start, last_end_, [&]() -> sim::event_details {
      return {{"algorithm", std::string(sim::name_of(how.chosen))},
              {"channels", std::to_string(how.channels)},
              {"bytes", std::to_string(e.shape.bytes)},
              {"ranks", std::to_string(members_->size())}};
    });
    if (drawn) {
      if (uneven) costs.record_links(*machine_->trace, members_->devices, call.sent_bytes, how.chosen, start);
      else
        costs.record_links(*machine_->trace, members_->id, members_->devices, e.shape, start);
    }
  }

  std::shared_ptr<machine_state> machine_;
  std::shared_ptr<group> members_;
  int rank_;
  sim::device* device_;
  sim::stream* stream_;
  std::uint64_t next_ = 0;
  std::uint64_t settled_ = 0;
  double last_end_ = 0;
  std::map<std::uint64_t, entry> unsettled_;
  std::unordered_map<std::uint64_t, double> ends_;
  std::map<std::pair<int, int>, std::uint64_t> sent_;
  std::map<std::pair<int, int>, std::uint64_t> received_;
};

// A started operation: its data movement, and how to learn its end once that is done.
struct started {
  started(threads::request movement, std::function<double()> end_once_moved)
      : data(std::move(movement)), end_of(std::move(end_once_moved)) {}
  threads::request data;
  std::function<double()> end_of;
  std::optional<double> end;

  double complete() {
    if (!end) {
      data.wait();
      end = end_of();
    }
    return *end;
  }
  bool test() {
    if (end) return true;
    if (!data.test()) return false;
    end = end_of();
    return true;
  }
};

}  // namespace detail

// A started operation (see shardwise::request): wait() moves the host clock to its end.
class request {
 public:
  request() = default;
  request(std::shared_ptr<detail::started> state, sim::device& host) : state_(std::move(state)), host_(&host) {}
  request(request&&) noexcept = default;
  request& operator=(request&& other) noexcept {
    finish_quietly();
    state_ = std::move(other.state_);
    host_ = other.host_;
    return *this;
  }
  ~request() { finish_quietly(); }

  void wait() {
    if (!state_) return;
    auto state = std::move(state_);
    host_->wait_until(state->complete());
  }
  bool test() {
    if (!state_) return true;
    if (!state_->test()) return false;
    host_->wait_until(*state_->end);
    state_.reset();
    return true;
  }

 private:
  // Like threads::request: finish when dropped, except during unwinding (the data part then aborts).
  void finish_quietly() noexcept {
    if (!state_) return;
    if (std::uncaught_exceptions() == 0) {
      try {
        wait();
      } catch (...) {  // the error already reached every rank's own calls; a destructor cannot throw
      }
    }
    state_.reset();
  }
  std::shared_ptr<detail::started> state_;
  sim::device* host_ = nullptr;
};

class communicator : public communicator_interface<communicator> {
 public:
  using request = sim_gpu::request;

  communicator(threads::communicator data, std::shared_ptr<detail::rank_clock> clock)
      : data_(std::move(data)), clock_(std::move(clock)) {}
  communicator(const communicator&) = delete;
  communicator& operator=(const communicator&) = delete;
  communicator(communicator&&) noexcept = default;
  communicator& operator=(communicator&&) noexcept = default;
  ~communicator() = default;

  [[nodiscard]] int rank() const noexcept { return data_.rank(); }
  [[nodiscard]] int size() const noexcept { return data_.size(); }
  [[nodiscard]] int world_rank() const noexcept { return data_.world_rank(); }

  // This rank's simulated GPU, the stream collectives go on, and virtual time on the host.
  [[nodiscard]] sim::device& device() const noexcept { return clock_->device(); }
  [[nodiscard]] sim::stream& stream() const noexcept { return clock_->stream(); }
  void use_stream(sim::stream& s) {
    if (&s != &device().stream_at(s.id()))
      throw argument_error(world_rank(), "use_stream", "the stream belongs to another device");
    clock_->use_stream(s);
  }
  [[nodiscard]] double now() const noexcept { return device().host_time(); }
  // The virtual time once this rank's streams have drained and all ranks have met: phases timed between
  // two such points are what a synchronized wall clock measures on a real machine.
  double synchronized_now() {
    device().synchronize();
    barrier();
    return now();
  }

  // For operations that model their own time (GPU-initiated kernels, fused/): the machine, the run's
  // timeline (null when not recorded), and this communicator's data movement without modelled time.
  [[nodiscard]] const sim::machine& machine() const noexcept { return clock_->machine()->model; }
  [[nodiscard]] sim::timeline* timeline() const noexcept { return clock_->machine()->trace.get(); }
  [[nodiscard]] threads::communicator& untimed() noexcept { return data_; }

  // A kernel of an operation over this communicator (the local GEMMs of ops/local_product.hpp): on the
  // compute stream (the device's default stream) doing `w`, with `compute` run now for its result. What
  // this communicator's stream runs later, and every collective and message of the device's other
  // communicators, waits for it: it may read that result (a reduction's copy launched over the world,
  // then its all-reduce along a mesh axis). Returns the kernel's end in virtual time.
  template <class Compute>
  double launch(const work& w, Compute&& compute, const std::string& name) {
    sim::stream& compute_stream = device().default_stream();
    const double end = clock_->machine()->mode == execution::full
                           ? compute_stream.launch(w, std::forward<Compute>(compute), name)
                           : compute_stream.launch(w, name);
    if (&stream() != &compute_stream) stream().wait(compute_stream.record());
    device().operation_launched(end);
    return end;
  }

  // Ranks passing the same colour form a communicator, ordered by key and then by rank. Collective;
  // it takes the time of an all-gather of two integers, as MPI_Comm_split does. On the default stream
  // the new communicator stays there; on a stream of its own (use_stream) it gets a new one, as each
  // NCCL communicator has its own stream, so that collectives of different communicators (a mesh's
  // axes) run beside each other.
  [[nodiscard]] communicator split(int color, int key) {
    const std::uint64_t sequence = clock_->issue({sim::collective::all_gather, 2 * sizeof(int), 0}, "split", {});
    auto part = data_.split(color, key);
    device().wait_until(clock_->end_of(sequence));
    // The new group's devices in its rank order, gathered through its own data movement (untimed).
    std::vector<int> members(static_cast<std::size_t>(part.size()));
    const int mine = world_rank();
    part.all_gather(std::span<const int>(&mine, 1), members);
    auto made = clock_->machine()->split_group({clock_->members()->serial, sequence, color}, members);
    // Named by the split's place among this communicator's collectives, which every run of the program
    // gives alike (the group's serial depends on which rank got there first), so timelines compare.
    sim::stream& on = &stream() == &device().default_stream()
                          ? stream()
                          : device().create_stream(stream().name() + " " + std::to_string(sequence));
    auto clock = std::make_shared<detail::rank_clock>(clock_->machine(), std::move(made), part.rank(), on);
    return communicator(std::move(part), std::move(clock));
  }

 private:
  friend struct shardwise::detail::backend_hooks;

  template <class Call>
  void run(const Call& call) {
    const std::uint64_t sequence = issue(call);
    move(call);
    device().wait_until(clock_->end_of(sequence));
  }
  template <class Call>
  [[nodiscard]] request start(const Call& call) {
    const std::uint64_t sequence = issue(call);
    auto state = std::make_shared<detail::started>(start_moving(call),
                                                   [clock = clock_, sequence] { return clock->end_of(sequence); });
    // Later work on the stream queues behind this collective.
    stream().defer([weak = std::weak_ptr<detail::started>(state)] {
      if (auto alive = weak.lock()) alive->complete();
    });
    return request(std::move(state), device());
  }

  template <class T>
  void run(const calls::send<T>& call) {
    device().wait_until(depart(call));
    move(call);
  }
  template <class T>
  [[nodiscard]] request start(const calls::send<T>& call) {
    const double sent = depart(call);
    auto data = start_moving(call);
    return request(std::make_shared<detail::started>(std::move(data), [sent] { return sent; }), device());
  }
  template <class T>
  void run(const calls::recv<T>& call) {
    start(call).wait();
  }
  template <class T>
  [[nodiscard]] request start(const calls::recv<T>& call) {
    const auto message =
        std::make_tuple(call.source, rank(), call.tag, clock_->next_message(false, call.source, call.tag));
    const double bytes = static_cast<double>(call.data.size_bytes());
    auto arrival = [clock = clock_, message, bytes] {
      const double left = clock->members()->departed(message);
      return left + clock->transfer_time(std::get<0>(message), std::get<1>(message), bytes);
    };
    count(call);
    auto data = start_moving(call);
    return request(std::make_shared<detail::started>(std::move(data), std::move(arrival)), device());
  }

  template <class Call>
  std::uint64_t issue(const Call& call) {
    count(call);
    return clock_->issue(detail::shape_of(call, size()), std::string(Call::name), detail::sent_bytes_of(call));
  }
  // This rank's traffic over all its communicators, for the run's report.
  template <class Call>
  void count(const Call& call) {
    clock_->machine()->traffic[static_cast<std::size_t>(world_rank())] += traffic_of(call, rank(), size());
  }

  // The call's data movement through the threads communicator, or what stands in for it where the
  // payload does not move (detail::moves_payload).
  template <class Call>
  void move(const Call& call) {
    if (detail::moves_payload<Call>(clock_->machine()->mode)) shardwise::detail::backend_hooks::run(data_, call);
    else
      shardwise::detail::backend_hooks::run(data_, detail::without_payload(call));
  }
  template <class Call>
  [[nodiscard]] threads::request start_moving(const Call& call) {
    if (detail::moves_payload<Call>(clock_->machine()->mode))
      return shardwise::detail::backend_hooks::start(data_, call);
    return shardwise::detail::backend_hooks::start(data_, detail::without_payload(call));
  }
  // When a message has left: from the moment the stream is free, latency + bytes / bandwidth.
  template <class T>
  double depart(const calls::send<T>& call) {
    count(call);
    const double leaves = clock_->departure();
    clock_->members()->depart(
        {rank(), call.destination, call.tag, clock_->next_message(true, call.destination, call.tag)}, leaves);
    return leaves +
           clock_->transfer_time(rank(), call.destination, static_cast<double>(call.data.size_bytes()), leaves);
  }

  threads::communicator data_;
  std::shared_ptr<detail::rank_clock> clock_;
};

static_assert(shardwise::communicator<communicator>, "sim_gpu::communicator must model shardwise::communicator");

// What a run leaves, per GPU: its virtual time when its body returned (after its streams drained), the
// traffic of all its collectives and messages (comm/traffic.hpp), and the high-water mark of the
// element storage its tensors, parameters and optimizer state and the working memory its operations
// held together (core/element_memory.hpp), in bytes; and the timeline if the machine recorded one.
struct report {
  std::vector<double> finish_times;
  std::vector<traffic_count> traffic;
  std::vector<std::int64_t> memory_high_water;
  std::shared_ptr<const sim::timeline> timeline;
  [[nodiscard]] double makespan() const {
    return finish_times.empty() ? 0.0 : *std::max_element(finish_times.begin(), finish_times.end());
  }
  // The largest GPU's high-water mark of element memory, in bytes.
  [[nodiscard]] std::int64_t largest_memory_high_water() const {
    return memory_high_water.empty() ? 0 : *std::max_element(memory_high_water.begin(), memory_high_water.end());
  }
};

// Runs body(communicator&) on `ranks` simulated GPUs (threads; fibers with shapes only) of `machine`, whose network
// must have exactly that many devices, computing everything or pricing shapes only (`how`). Failures propagate as in
// threads::run.
template <class Body>
report run(int ranks, sim::machine machine, Body&& body, execution how = execution::full) {
  if (machine.network.devices() != ranks)
    throw argument_error(-1, "sim_gpu::run",
                         "the machine's network joins " + std::to_string(machine.network.devices()) +
                             " GPUs, the run has " + std::to_string(ranks) + " ranks");
  auto state = std::make_shared<detail::machine_state>(ranks, std::move(machine), how);
  std::vector<int> everyone(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) everyone[static_cast<std::size_t>(r)] = r;
  const auto world = state->make_group(std::move(everyone));
  threads::run(
      ranks,
      [&](threads::communicator& data) {
        const int rank = data.rank();
        auto& gpu = *state->devices[static_cast<std::size_t>(rank)];
        const element_memory::scope storage(state->memory[static_cast<std::size_t>(rank)]);
        communicator comm(std::move(data),
                          std::make_shared<detail::rank_clock>(state, world, rank, gpu.default_stream()));
        body(comm);
        gpu.synchronize();
      },
      how == execution::shapes_only ? threads::ranks_as::fibers : threads::ranks_as::threads);
  report result;
  for (const auto& gpu : state->devices) result.finish_times.push_back(gpu->host_time());
  result.traffic = state->traffic;
  for (const auto& held : state->memory) result.memory_high_water.push_back(held->high_water());
  result.timeline = state->trace;
  return result;
}

}  // namespace shardwise::sim_gpu
