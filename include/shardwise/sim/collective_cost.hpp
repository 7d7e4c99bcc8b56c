#pragma once
// The modelled duration of a collective on a group of devices: the steps of its algorithm
// (sim/schedule.hpp) played on the network (sim/network.hpp), each step taking as long as its
// slowest transfer and the reduction of what arrived, which overlap segment by segment (as NCCL's
// slices do; reduced_as_it_arrives). A run shares one collective_cost among its
// ranks; durations are cached per (placement, collective, size, root), since programs repeat the same
// calls, so each distinct call is simulated once however many ranks and iterations ask. A placement is
// a group (with the groups that run beside it, below) up to the topology's symmetries: the 256
// tensor-parallel groups of a 4096-GPU mesh, one per node, cost the same, so they are simulated once,
// not 256 times (placement_class_of says which groups the network cannot tell apart).
//
// Which algorithm: a fixed choice (machine.algorithms), or for an automatic one the applicable
// algorithm of least modelled time on the group's devices — so the placement decides: where the GPUs
// of a node share one network interface, a large all-reduce goes hierarchical or round the ring, whose
// steps cross the interface once each way, not Rabenseifner, whose exchanges between the nodes queue
// on it. The hierarchical algorithm takes the group's nodes from the topology (placement_of).
// The chosen algorithm runs in the number of channels (comm/algorithms/pattern.hpp) of least modelled
// time too, whether the algorithm was fixed or chosen: on full-duplex rings and tori, rings going both
// ways (and, on a torus, along both dimensions at once) use links one channel leaves idle.
// algorithm_choice::by_modelled_cost = false keeps the MPICH rule instead, in one channel.
//
// Groups that run together: with machine.axis_groups_share_links, a collective is played with the
// same steps on every translate of its group that tiles the machine (concurrent_groups), and lasts
// until the group's own transfers are done. A mesh axis is such a tiling, and its groups issue the
// same collectives at once, so their transfers contend where they share links (a node's NIC).
//
// Different collectives at once: a collective that starts while collectives of other groups run on
// its devices (SUMMA's column broadcast beside its row broadcast, the 3-D product's two all-gathers)
// is played beside them (duration_beside): step by step together with what is left of theirs, each
// with its axis's translates, so their transfers share links. The backends pass the collectives
// they priced before this one on its devices (sim/collectives_in_flight.hpp), so the one priced later
// of two that overlap pays for the contention; with two collectives waited for together (a product
// needs both panels) the later end is what the program sees, and it is the one that pays.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "shardwise/sim/collectives_in_flight.hpp"
#include "shardwise/sim/machine.hpp"
#include "shardwise/sim/network.hpp"
#include "shardwise/sim/schedule.hpp"
#include "shardwise/sim/timeline.hpp"
#include "shardwise/sim/topology.hpp"

namespace shardwise::sim {

class collective_cost {
 public:
  // Holds the machine by reference, so it must outlive this: a temporary one would be gone before the
  // first call. Deleted rather than a static_assert, so that the compiler's error shows the line below.
  explicit collective_cost(const machine& model) : model_(&model) {}
  explicit collective_cost(const machine&&) = delete;  // holds the machine by reference: name it in a variable
  collective_cost(const collective_cost&) = delete;
  collective_cost& operator=(const collective_cost&) = delete;

  // A small number naming a group of devices (communicator ranks in order), the same for equal groups.
  int group_id(const std::vector<int>& devices) {
    std::lock_guard lock(mutex_);
    const auto [found, added] = groups_.try_emplace(devices, static_cast<int>(groups_.size()));
    if (added) {
      devices_of_group_.push_back(devices);
      const auto placement =
          placements_.try_emplace(placement_class_of(concurrent_groups(devices)), static_cast<int>(placements_.size()));
      placement_of_group_.push_back(placement.first->second);
    }
    return found->second;
  }

  // How many groups the run named, and how many placements the network can tell apart among them:
  // each collective is simulated once per placement.
  [[nodiscard]] std::size_t groups() const {
    std::lock_guard lock(mutex_);
    return groups_.size();
  }
  [[nodiscard]] std::size_t placements() const {
    std::lock_guard lock(mutex_);
    return placements_.size();
  }

  // How the collective runs on group `group` (devices, in communicator rank order): its algorithm, in
  // how many channels, and the seconds from the moment every member has arrived until it is complete
  // everywhere.
  struct choice {
    algorithm chosen;
    int channels;
    double seconds;
  };
  choice choose(int group, const std::vector<int>& devices, const collective_shape& shape) {
    return timed(group, devices, shape);
  }
  double duration(int group, const std::vector<int>& devices, const collective_shape& shape) {
    return timed(group, devices, shape).seconds;
  }
  // The collective's seconds on `group` from `start` on, played beside those of `others` that overlap
  // it (running on other groups, priced before it): its own algorithm and channels (chosen alone, as
  // a library's tuning chooses) played together with theirs, all with their axes' translates, each
  // collective going on to its next step when its own transfers of the step are done
  // (play_together). Another enters where its priced interval says it is at `start`, read off its
  // steps played alone and taken to 1/64 of the interval (so that a program's repeated calls meet
  // in the cache). Alone when none overlaps it.
  double duration_beside(int group, const std::vector<int>& devices, const collective_shape& shape, double start,
                         std::span<const running_collective> others) {
    const choice alone = timed(group, devices, shape);
    if (shape.bytes <= 0) return alone.seconds;
    std::vector<const running_collective*> overlapping;
    for (const auto& other : others)
      if (before(other.start, start + alone.seconds) && before(start, other.end) && other.end > other.start)
        overlapping.push_back(&other);
    if (overlapping.empty()) return alone.seconds;

    constexpr double parts = 64;
    std::lock_guard lock(mutex_);
    std::vector<int> ids{group};
    beside_key key{0, {shape_key(shape)}, {}};
    std::vector<lane> lanes{{{}, steps_of(alone.chosen, alone.channels, shape, devices)}};
    std::vector<double> others_alone;
    for (const auto* other : overlapping) {
      const auto& other_devices = devices_of_group_.at(static_cast<std::size_t>(other->group));
      const choice how = cached(other->group, other_devices, other->shape);
      const double interval = other->end - other->start;
      ids.push_back(other->group);
      key.shapes.push_back(shape_key(other->shape));
      // Where `start` falls in its interval, and the interval against its time alone, in 64ths.
      key.positions.emplace_back(std::llround((start - other->start) / interval * parts),
                                 std::llround(interval / how.seconds * parts));
      lanes.push_back({{}, steps_of(how.chosen, how.channels, other->shape, other_devices)});
      others_alone.push_back(how.seconds);
    }
    key.placement = together_placement(ids);
    if (const auto found = beside_cache_.find(key); found != beside_cache_.end()) return found->second;
    for (std::size_t i = 0; i < lanes.size(); ++i) lanes[i].groups = translates_.at(ids[i]);
    for (std::size_t i = 1; i < lanes.size(); ++i) {
      const auto [offset, stretch] = key.positions[i - 1];
      const double interval = static_cast<double>(stretch) / parts * others_alone[i - 1];
      if (offset < 0)  // not begun: it enters when it starts
        lanes[i].clock = -static_cast<double>(offset) / parts * interval;
      else if (offset > 0)
        lanes[i].skip_done(static_cast<double>(offset) / parts, step_seconds_alone(lanes[i]));
    }
    const double seconds = play_together(lanes);
    beside_cache_.emplace(std::move(key), seconds);
    return seconds;
  }

  // all_to_all_v: bytes[s][d] from member s to member d (not cached: counts change from call to call).
  // Priced alone: the other groups' counts are not known.
  [[nodiscard]] choice choose(const std::vector<int>& devices, const std::vector<std::vector<double>>& bytes) const {
    return cheapest({collective::all_to_all_v, 0, 0}, static_cast<int>(devices.size()), placement_of(devices),
                    [&](algorithm a, int) { return play({devices}, uneven_all_to_all_steps(a, bytes), nullptr, 0); });
  }

  // Draws the collective's link activity from `start` on (for timelines).
  void record_links(timeline& trace, int group, const std::vector<int>& devices, const collective_shape& shape,
                    double start) {
    const choice chosen = timed(group, devices, shape);
    play(concurrent_groups(devices), steps_of(chosen.chosen, chosen.channels, shape, devices), &trace, start);
  }
  void record_links(timeline& trace, const std::vector<int>& devices, const std::vector<std::vector<double>>& bytes,
                    algorithm chosen, double start) const {
    play({devices}, uneven_all_to_all_steps(chosen, bytes), &trace, start);
  }

  // The steps played one after another from `start` by `groups` at once (the first is the one priced;
  // the others run the same steps on their own devices and share the links): the first group's total
  // duration. With a timeline, the busy interval of every link the first group's transfers use, in
  // every step (repeated steps drawn up to a limit that keeps traces small).
  double play(const std::vector<std::vector<int>>& groups, const std::vector<step>& steps, timeline* trace,
              double start) const {
    constexpr std::int64_t drawn_repeats = 256;
    double elapsed = 0;
    if (trace) trace->name_process(timeline::network_process, "network");
    for (const auto& s : steps) {
      const network_timing timing = simulate(model_->network, transfers_of(groups, s), trace != nullptr);
      const double step_time = own_step_time(s, timing);
      if (trace) draw(*trace, groups.front(), s, timing, start + elapsed, step_time, std::min(s.repeat, drawn_repeats));
      elapsed += step_time * static_cast<double>(s.repeat);
    }
    return elapsed;
  }

 private:
  // Whether time (or cost) `a` is less than `b` by more than rounding. Times that differ by rounding
  // alone are one time, so that no choice the model makes (which lane plays next, which step another
  // runs then, whether two intervals overlap, which candidate is cheaper) turns on how a compiler
  // rounded: lanes in step often meet at one moment, and contracted multiply-adds (-O3, not -Og) move
  // it by the last bits.
  [[nodiscard]] static bool before(double a, double b) noexcept {
    return a < b - 1e-9 * std::max(std::abs(a), std::abs(b));
  }

  // A collective played beside others: the groups running it (the first is the one priced), its
  // steps, and where it is: step `next`, with `left` instances of it to go, the current one starting
  // at `clock` (seconds after the first lane's start); `last` the step of its previous instance and
  // when that began, for lanes that have gone ahead.
  struct lane {
    std::vector<std::vector<int>> groups;
    std::vector<step> steps;
    std::size_t next = 0;
    std::int64_t left = steps.empty() ? 0 : steps.front().repeat;
    double clock = 0;
    int last = -1;
    double last_began = 0;

    [[nodiscard]] bool done() const { return next >= steps.size(); }
    void advance(double seconds) {
      last = static_cast<int>(next);
      last_began = clock;
      clock += seconds;
      if (--left == 0 && ++next < steps.size()) left = steps[next].repeat;
    }
    // Skips the instances that, played alone (`seconds` each step's), fill `fraction` of its time.
    void skip_done(double fraction, const std::vector<double>& seconds) {
      double total = 0;
      for (std::size_t i = 0; i < steps.size(); ++i) total += seconds[i] * static_cast<double>(steps[i].repeat);
      double behind = fraction * total;
      while (!done() && !before(behind, seconds[next])) {
        behind -= seconds[next];
        advance(0);
      }
      last = -1;
    }
    // The step this lane runs at time `t`, or -1 (not begun, or done before `t`).
    [[nodiscard]] int step_at(double t) const {
      if (!done() && !before(t, clock)) return static_cast<int>(next);
      if (last >= 0 && !before(t, last_began) && before(t, clock)) return last;
      return -1;
    }
  };

  // Each step's time played alone by a lane's groups.
  [[nodiscard]] std::vector<double> step_seconds_alone(const lane& l) const {
    std::vector<double> seconds;
    for (const auto& s : l.steps)
      seconds.push_back(own_step_time(s, simulate(model_->network, transfers_of(l.groups, s), false)));
    return seconds;
  }

  // The first lane's duration, the lanes played together: the lane that is furthest behind in time
  // plays its next step instance together with the step each other lane runs at that moment, and
  // takes as long as its own group's transfers of it and its reduction; so every lane is slowed by
  // the others while they run beside it. Combinations met before are not simulated again.
  double play_together(std::vector<lane>& lanes) const {
    std::map<std::pair<std::size_t, std::vector<int>>, double> met;  // (lane, every lane's step) -> time
    std::vector<int> at(lanes.size());
    std::vector<transfer> transfers;
    lane& own = lanes.front();
    while (!own.done()) {
      std::size_t turn = 0;
      for (std::size_t i = 1; i < lanes.size(); ++i)
        if (!lanes[i].done() && before(lanes[i].clock, lanes[turn].clock)) turn = i;
      lane& playing = lanes[turn];
      for (std::size_t i = 0; i < lanes.size(); ++i)
        at[i] = i == turn ? static_cast<int>(playing.next) : lanes[i].step_at(playing.clock);
      const auto [found, added] = met.try_emplace({turn, at}, 0.0);
      if (added) {
        transfers = transfers_of(playing.groups, playing.steps[playing.next]);
        for (std::size_t i = 0; i < lanes.size(); ++i)
          if (i != turn && at[i] >= 0) {
            const auto company = transfers_of(lanes[i].groups, lanes[i].steps[static_cast<std::size_t>(at[i])]);
            transfers.insert(transfers.end(), company.begin(), company.end());
          }
        found->second = own_step_time(playing.steps[playing.next], simulate(model_->network, transfers, false));
      }
      playing.advance(found->second);
    }
    return own.clock;
  }

  // Step `s` of every group in `groups`, the first group's transfers first.
  [[nodiscard]] static std::vector<transfer> transfers_of(const std::vector<std::vector<int>>& groups, const step& s) {
    std::vector<transfer> transfers;
    for (const auto& members : groups)
      for (const auto& e : s.exchanges)
        transfers.push_back({members[static_cast<std::size_t>(e.source)],
                             members[static_cast<std::size_t>(e.destination)], e.bytes, 0});
    return transfers;
  }
  // How long step `s` lasts for the first group, its transfers (the first of `timing`) and reduction.
  [[nodiscard]] double own_step_time(const step& s, const network_timing& timing) const {
    double own_finish = 0;
    for (std::size_t i = 0; i < s.exchanges.size(); ++i) own_finish = std::max(own_finish, timing.transfers[i].finish);
    return reduced_as_it_arrives(own_finish, s.reduced_bytes);
  }

  // The busy intervals of the links step `s` of `devices` uses, `count` instances from `from` on.
  void draw(timeline& trace, const std::vector<int>& devices, const step& s, const network_timing& timing, double from,
            double step_time, std::int64_t count) const {
    std::set<std::int64_t> own_links;
    for (const auto& e : s.exchanges)
      for (const auto link : model_->network
                                 .route_between(devices[static_cast<std::size_t>(e.source)],
                                                devices[static_cast<std::size_t>(e.destination)])
                                 .links)
        own_links.insert(link);
    for (std::int64_t k = 0; k < count; ++k)
      for (const auto& busy : timing.links) {
        if (!own_links.contains(busy.link)) continue;
        const track t{timeline::network_process, busy.link};
        if (!trace.has_track(t)) trace.name_track(t, model_->network.link_name(busy.link));
        trace.add(t, std::to_string(busy.transfers) + (busy.transfers == 1 ? " transfer" : " transfers"),
                  from + static_cast<double>(k) * step_time + busy.begin, busy.end - busy.begin);
      }
  }

  // When a step whose transfers end at `arrived` is done, its receivers reducing `reduced` bytes: the
  // data comes in slices of reduction_slice_bytes and each is reduced as soon as it is in, while the
  // next arrives (as NCCL's slices are), so a two-stage pipeline of k slices: it ends one slice's
  // reduction after the transfers, or one slice's transfer before the reductions end.
  [[nodiscard]] double reduced_as_it_arrives(double arrived, double reduced) const {
    if (reduced <= 0) return arrived;
    const double reducing = model_->device.reduction_time(reduced);
    const double segments = std::max(1.0, std::ceil(reduced / model_->algorithms.reduction_slice_bytes));
    return std::max(arrived + reducing / segments, arrived / segments + reducing);
  }

  [[nodiscard]] std::vector<step> steps_of(algorithm a, int channels, const collective_shape& shape,
                                           const std::vector<int>& devices) const {
    return schedule(a, shape, static_cast<int>(devices.size()), model_->algorithms.pipeline_segment_bytes,
                    placement_of(devices), channels);
  }

  // The groups that run a collective with `devices` at the same moment: `devices` first, then each
  // translate of it that fits among the devices not yet taken, by the topology's translations (cyclic
  // on a ring, in both dimensions on a torus, along the GPU numbering across nodes), trying shifts in
  // order from `devices`, so that a translate of a group keeps company with the translates of its own.
  [[nodiscard]] std::vector<std::vector<int>> concurrent_groups(const std::vector<int>& devices) const {
    std::vector<std::vector<int>> groups{devices};
    const topology& net = model_->network;
    const int all = net.devices();
    // Where disjoint groups' transfers cannot meet on a link (fully connected, a NIC per GPU), there is
    // nothing to play with the others.
    if (!model_->axis_groups_share_links || !net.disjoint_routes_can_meet() || devices.size() <= 1 ||
        static_cast<int>(devices.size()) >= all)
      return groups;
    // On a torus shift k moves a device by k / c chips and k mod c places on its chip (c a chip's
    // devices), so the groups of one core of every chip have the other core's as translates.
    const int per_chip = net.devices_per_chip();
    const int first = devices.front(), cols = net.columns(), rows = all / per_chip / cols;
    // Device d moved by shift k (0 ≤ k < all), or -1 off the machine.
    const auto moved = [&](int d, int k) {
      switch (net.kind()) {
        case topology::shape::torus_2d: {
          const int chip = d / per_chip, by = k / per_chip;
          return ((chip / cols + by / cols) % rows * cols + (chip % cols + by % cols) % cols) * per_chip +
                 (d + k) % per_chip;
        }
        case topology::shape::nodes: {
          const int t = d + k - (k > all - 1 - first ? all : 0);  // shifts past the last device wrap to negative
          return t >= 0 && t < all ? t : -1;
        }
        default: return (d + k) % all;
      }
    };
    std::vector<char> taken(static_cast<std::size_t>(all), 0);
    for (const int d : devices) taken[static_cast<std::size_t>(d)] = 1;
    std::vector<int> translate;
    for (int k = 1; k < all; ++k) {
      translate.clear();
      for (const int d : devices) {
        const int t = moved(d, k);
        if (t < 0 || taken[static_cast<std::size_t>(t)]) break;
        translate.push_back(t);
      }
      if (translate.size() != devices.size()) continue;
      for (const int t : translate) taken[static_cast<std::size_t>(t)] = 1;
      groups.push_back(translate);
    }
    return groups;
  }

  // The group's members in nodes of equal width, consecutive in rank order (how the hierarchical
  // algorithm sees them); nodes of one member when the group is not laid out so. A torus's rows (of
  // chips, with their devices) count as its nodes: the hierarchical all-reduce then runs along the
  // rows, down the columns and along the rows again, the torus's two-phase all-reduce.
  [[nodiscard]] placement placement_of(const std::vector<int>& devices) const {
    const topology& net = model_->network;
    const int per_node =
        net.kind() == topology::shape::torus_2d ? net.columns() * net.devices_per_chip() : net.gpus_per_node();
    const auto node = [&](std::size_t i) { return devices[i] / per_node; };
    std::size_t width = 1;
    while (width < devices.size() && node(width) == node(0)) ++width;
    if (devices.size() % width != 0) return {};
    for (std::size_t i = 0; i < devices.size(); ++i)
      if (node(i) != node(i - i % width)) return {};
    return {static_cast<int>(width)};
  }

  // The groups relabelled by what the network model can tell of them (the first group's size, then
  // every member of each group in turn), so that groups it prices alike get one label. Nodes: each
  // member's node and NIC, numbered in order of first appearance (links inside a node, one a pair
  // or a port a GPU, are all alike; the NICs and their sharing are what differ). Ring and torus: the members relative
  // to the first group's first (in chips, each device keeping its place on its chip), which is exact
  // for their translation symmetry. A fully connected network tells groups apart by size only.
  [[nodiscard]] std::vector<int> placement_class_of(const std::vector<std::vector<int>>& groups) const {
    const topology& net = model_->network;
    const int origin = groups.front().front();
    std::vector<int> label{static_cast<int>(groups.front().size())};
    std::map<std::int64_t, int> node_label, nic_label;
    int position = 0;
    for (const auto& devices : groups)
      for (const int d : devices) {
        switch (net.kind()) {
          case topology::shape::fully_connected: label.push_back(position++); break;
          case topology::shape::ring: label.push_back((d - origin + net.devices()) % net.devices()); break;
          case topology::shape::torus_2d: {
            const int c = net.devices_per_chip(), cols = net.columns(), rows = net.devices() / c / cols;
            const int chip = d / c, origin_chip = origin / c;
            label.push_back(((chip / cols - origin_chip / cols + rows) % rows * cols +
                             (chip % cols - origin_chip % cols + cols) % cols) *
                                c +
                            d % c);
            break;
          }
          case topology::shape::nodes:
            label.push_back(
                node_label.try_emplace(d / net.gpus_per_node(), static_cast<int>(node_label.size())).first->second);
            label.push_back(nic_label.try_emplace(net.nic_of(d), static_cast<int>(nic_label.size())).first->second);
            break;
        }
      }
    return label;
  }

  choice timed(int group, const std::vector<int>& devices, const collective_shape& shape) {
    std::lock_guard lock(mutex_);
    return cached(group, devices, shape);
  }
  // timed() with the lock held.
  choice cached(int group, const std::vector<int>& devices, const collective_shape& shape) {
    const int ranks = static_cast<int>(devices.size());
    const auto key =
        std::tuple_cat(std::make_tuple(placement_of_group_.at(static_cast<std::size_t>(group))), shape_key(shape));
    if (const auto found = cache_.find(key); found != cache_.end()) return found->second;
    const auto together = concurrent_groups(devices);
    const choice best = cheapest(shape, ranks, placement_of(devices), [&](algorithm a, int channels) {
      return play(together, steps_of(a, channels, shape, devices), nullptr, 0);
    });
    cache_.emplace(key, best);
    return best;
  }

  // The rule's algorithm in one channel, or with by_modelled_cost the applicable algorithm (any, when the
  // collective's is automatic) and channel count of least `seconds_of(algorithm, channels)`; fewer
  // channels and the rule's algorithm win ties, as times within rounding of each other (before()).
  template <class SecondsOf>
  [[nodiscard]] choice cheapest(const collective_shape& shape, int ranks, const placement& where,
                                const SecondsOf& seconds_of) const {
    const algorithm_choice& rules = model_->algorithms;
    const algorithm by_rule = rules.pick(shape, ranks);
    choice best{by_rule, 1, seconds_of(by_rule, 1)};
    const auto weigh = [&](algorithm a, int channels) {
      if (!applies(shape.kind, a, ranks, where, channels)) return;
      const double seconds = seconds_of(a, channels);
      if (before(seconds, best.seconds)) best = {a, channels, seconds};
    };
    if (rules.by_modelled_cost) {
      for (int channels = 2; channels <= most_channels(by_rule, where); channels *= 2) weigh(by_rule, channels);
      if (rules.is_automatic(shape.kind))
        for (const algorithm a :
             {algorithm::ring, algorithm::recursive_doubling, algorithm::rabenseifner, algorithm::hierarchical,
              algorithm::binomial, algorithm::pipelined, algorithm::direct})
          if (a != by_rule)
            for (int channels = 1; channels <= most_channels(a, where); channels *= 2) weigh(a, channels);
    }
    return best;
  }

  static std::tuple<int, double, int> shape_key(const collective_shape& shape) {
    return {static_cast<int>(shape.kind), shape.bytes, shape.root};
  }

  // A number naming the placement of groups `ids` running together (each with its translates, kept in
  // translates_ for the play), the same for sets of groups the network cannot tell apart.
  int together_placement(const std::vector<int>& ids) {
    if (const auto found = together_.find(ids); found != together_.end()) return found->second;
    std::vector<std::vector<int>> all;
    std::vector<int> label;
    for (const int id : ids) {
      auto [kept, added] = translates_.try_emplace(id);
      if (added) kept->second = concurrent_groups(devices_of_group_.at(static_cast<std::size_t>(id)));
      const auto& groups = kept->second;
      label.push_back(static_cast<int>(groups.size()));
      label.push_back(static_cast<int>(groups.front().size()));
      all.insert(all.end(), groups.begin(), groups.end());
    }
    const auto by_network = placement_class_of(all);
    label.insert(label.end(), by_network.begin(), by_network.end());
    const int placement =
        together_placements_.try_emplace(label, static_cast<int>(together_placements_.size())).first->second;
    together_.emplace(ids, placement);
    return placement;
  }

  struct beside_key {
    int placement;
    std::vector<std::tuple<int, double, int>> shapes;
    std::vector<std::pair<long long, long long>> positions;  // each other's (offset, stretch), in 64ths
    friend auto operator<=>(const beside_key&, const beside_key&) = default;
  };

  const machine* model_;
  mutable std::mutex mutex_;
  std::map<std::vector<int>, int> groups_;
  std::map<std::vector<int>, int> placements_;
  std::vector<int> placement_of_group_;                      // by group id
  std::vector<std::vector<int>> devices_of_group_;           // by group id
  std::map<std::vector<int>, int> together_;                 // group ids -> together_placements_ id
  std::map<int, std::vector<std::vector<int>>> translates_;  // group id -> concurrent_groups, once played beside others
  std::map<std::vector<int>, int> together_placements_;
  std::map<beside_key, double> beside_cache_;
  std::map<std::tuple<int, int, double, int>, choice> cache_;
};

}  // namespace shardwise::sim
