#pragma once
// When GPU-initiated messages arrive: each link carries one message at a time (a NIC works through its
// queue; a peer link through its stores), the messages placed in the order they were issued.
//
// A message issued at t takes each link of its route in turn, at the first time from when its head
// reaches the link (cut-through: the head goes on as soon as a link takes it) that the link is idle
// long enough to hold it: message_overhead (only when it crosses between nodes: NIC work) + bytes /
// (the route's slowest bandwidth), and no less than until the link before released it. It arrives one
// route latency after the last link releases it. Links buffer: a sender's NIC does not stall behind
// one busy receiver (which had made the fused embedding of 8 GPUs in 8 nodes up to 5.5× slower than
// its baseline in the model), and a message placed later takes a link's idle time before messages
// placed earlier whose heads were still upstream, which on routes of several hops would otherwise be
// lost (128 GPUs' all-to-all as messages on a 16 × 8 torus took 3.3× the collective's time; 1.05×
// with it). Many small messages cost their overheads one after another (a message-rate bound), while
// large ones approach the link's bandwidth. Collectives use the equal-share model (sim/network.hpp)
// instead: their transfers start together; these are issued one by one over a kernel's lifetime.
// O(messages × route length × log messages) after a sort; no per-message simulation of shares.
#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "shardwise/sim/timeline.hpp"
#include "shardwise/sim/topology.hpp"

namespace shardwise::sim {

struct message {
  int source = 0;
  int destination = 0;
  double bytes = 0;
  double issued = 0;  // s
};

// Whether a transfer between two devices leaves the node (and so goes through a NIC).
[[nodiscard]] inline bool crosses_nodes(const topology& net, int source, int destination) noexcept {
  return net.kind() == topology::shape::nodes && source / net.gpus_per_node() != destination / net.gpus_per_node();
}

// Arrival time of every message, in the order given. With a timeline, each link's busy time is drawn
// on its track of the "network" process (back-to-back messages merged into one interval).
[[nodiscard]] inline std::vector<double> deliver(const topology& net, std::span<const message> messages,
                                                 double message_overhead, timeline* trace = nullptr) {
  std::vector<std::size_t> order(messages.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return messages[a].issued < messages[b].issued; });
  // Per link, when it carries messages: begin -> (end, messages), back-to-back messages merged, so
  // that the search for idle time passes over gaps, not over every message of a busy link.
  struct carrying {
    double end;
    int messages;
  };
  std::map<std::int64_t, std::map<double, carrying>> busy;
  std::vector<double> arrival(messages.size());
  for (const std::size_t i : order) {
    const auto& m = messages[i];
    const route r = net.route_between(m.source, m.destination);
    if (r.links.empty()) {
      arrival[i] = m.issued;
      continue;
    }
    double bandwidth = net.bandwidth(r.links.front());
    for (const auto link : r.links) bandwidth = std::min(bandwidth, net.bandwidth(link));
    const double hold = (crosses_nodes(net, m.source, m.destination) ? message_overhead : 0.0) + m.bytes / bandwidth;
    double reached = m.issued, end = m.issued;
    for (const auto link : r.links) {
      // The first idle time from `reached` on long enough for the message: its tail leaves a link no
      // sooner than the link before.
      auto& carries = busy[link];
      double begin = reached;
      auto next = carries.upper_bound(begin);
      for (;; ++next) {
        if (next != carries.begin()) begin = std::max(begin, std::prev(next)->second.end);
        if (next == carries.end() || next->first >= std::max(end, begin + hold)) break;
      }
      end = std::max(end, begin + hold);
      reached = begin;  // cut-through: the head goes on as soon as a link takes the message
      if (end <= begin) continue;
      carrying now{end, 1};
      if (next != carries.end() && next->first <= end) {
        now = {next->second.end, next->second.messages + 1};
        next = carries.erase(next);
      }
      if (next != carries.begin() && std::prev(next)->second.end >= begin) {
        auto& before = std::prev(next)->second;
        before = {now.end, before.messages + now.messages};
      } else {
        carries.emplace_hint(next, begin, now);
      }
    }
    arrival[i] = end + r.latency;
  }
  if (trace && !busy.empty()) {
    trace->name_process(timeline::network_process, "network");
    for (const auto& [link, carries] : busy) {
      const track t{timeline::network_process, link};
      if (!trace->has_track(t)) trace->name_track(t, net.link_name(link));
      for (const auto& [begin, c] : carries)
        trace->add(t, std::to_string(c.messages) + " GPU-initiated messages", begin, c.end - begin);
    }
  }
  return arrival;
}

}  // namespace shardwise::sim
