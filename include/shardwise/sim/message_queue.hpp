#pragma once
// When GPU-initiated messages arrive: each link carries its messages one after another, in the order
// they were issued (a NIC works through its queue; a peer link through its stores).
//
// A message issued at t takes each link of its route in turn: a link takes it once the link is free
// and the message's head has reached it (cut-through: the head goes on as soon as a link takes it), and
// holds it for message_overhead (only when it crosses between nodes: NIC work) + bytes / (the route's
// slowest bandwidth), and no sooner than the link before released it; it arrives one route latency
// after the last link releases it. A link released by a message takes the next one even while that
// message waits further on (switches buffer): a sender's NIC does not stall behind one busy receiver,
// which had made every message of 8 GPUs in 8 nodes wait for the others' and the fused embedding up to
// 5.5× slower than its baseline in the model. Many small messages cost their overheads one after
// another (a message-rate bound), while large ones approach the link's bandwidth. Collectives use the
// equal-share model (sim/network.hpp) instead: their transfers start together; these are issued one by
// one over a kernel's lifetime.
// O(messages × route length) after a sort; no per-message simulation of shares.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <unordered_map>
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
  std::unordered_map<std::int64_t, double> link_free;
  struct busy {
    double begin = 0;
    double end = 0;
    int messages = 0;
  };
  std::unordered_map<std::int64_t, busy> drawing;
  auto draw = [&](std::int64_t link, const busy& b) {
    const track t{timeline::network_process, link};
    if (!trace->has_track(t)) {
      trace->name_process(timeline::network_process, "network");
      trace->name_track(t, net.link_name(link));
    }
    trace->add(t, std::to_string(b.messages) + " GPU-initiated messages", b.begin, b.end - b.begin);
  };
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
      const double begin = std::max(reached, link_free[link]);
      end = std::max(end, begin + hold);  // its tail leaves a link no sooner than the link before
      link_free[link] = end;
      reached = begin;  // cut-through: the head goes on as soon as a link takes the message
      if (!trace) continue;
      auto& b = drawing[link];
      if (b.messages > 0 && begin > b.end) {
        draw(link, b);
        b = {};
      }
      if (b.messages == 0) b.begin = begin;
      b.end = end;
      ++b.messages;
    }
    arrival[i] = end + r.latency;
  }
  if (trace)
    for (const auto& [link, b] : drawing)
      if (b.messages > 0) draw(link, b);
  return arrival;
}

}  // namespace shardwise::sim
