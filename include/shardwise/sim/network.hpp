#pragma once
// When transfers over a topology finish, with links shared by the transfers using them at once.
//
// A transfer issued at `start` first waits its route's latency, then streams its bytes. While it
// streams, each link on its route gives it an equal share of the link's bandwidth among all
// transfers streaming over that link right now, and it moves at the smallest of those shares (its
// bottleneck). Shares change only when a transfer starts or stops streaming, so the simulation jumps
// from one such event to the next. Alone on its route a transfer takes latency + bytes / bandwidth,
// the α-β model; n transfers sharing one link from the same instant take latency + n·bytes/bandwidth.
// (Equal shares, not max-min fairness: a transfer held back elsewhere does not hand its unused share
// to the others. Simple, and exact for the symmetric patterns collectives make.)
#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <unordered_map>
#include <vector>

#include "shardwise/sim/topology.hpp"

namespace shardwise::sim {

struct transfer {
  int source = 0;
  int destination = 0;
  double bytes = 0;
  double start = 0;  // s
};

struct transfer_timing {
  double streaming = 0;  // when its first byte leaves (start + route latency)
  double finish = 0;     // when its last byte arrives
};

// When one link carried data, and for how many of the transfers (for timelines).
struct link_busy {
  std::int64_t link = 0;
  double begin = 0;
  double end = 0;
  int transfers = 0;
};

struct network_timing {
  std::vector<transfer_timing> transfers;  // in the order given
  std::vector<link_busy> links;            // one entry per link used, first byte to last
  [[nodiscard]] double finish() const noexcept {
    double last = 0;
    for (const auto& t : transfers) last = std::max(last, t.finish);
    return last;
  }
};

// `record_links`: also report each link's busy interval (only timelines need it; it costs a map).
inline network_timing simulate(const topology& net, std::span<const transfer> transfers, bool record_links = true) {
  const std::size_t n = transfers.size();
  network_timing result;
  result.transfers.resize(n);
  std::vector<route> routes(n);
  std::vector<double> remaining(n);
  std::vector<std::size_t> waiting;  // not yet streaming, sorted by when they start to
  for (std::size_t i = 0; i < n; ++i) {
    routes[i] = net.route_between(transfers[i].source, transfers[i].destination);
    result.transfers[i].streaming = transfers[i].start + routes[i].latency;
    remaining[i] = transfers[i].bytes;
    waiting.push_back(i);
  }
  std::sort(waiting.begin(), waiting.end(), [&](std::size_t a, std::size_t b) {
    return result.transfers[a].streaming > result.transfers[b].streaming;  // earliest at the back
  });

  std::unordered_map<std::int64_t, link_busy> busy;
  std::unordered_map<std::int64_t, int> users;  // streaming transfers per link right now
  std::vector<std::size_t> streaming;
  std::vector<double> rate(n, 0);
  std::vector<double> due(n, 0);  // when it finishes at its current rate
  double now = 0;
  constexpr double infinity = std::numeric_limits<double>::infinity();

  auto finish = [&](std::size_t i) {
    result.transfers[i].finish = now;
    for (const auto link : routes[i].links) --users[link];
  };
  while (!waiting.empty() || !streaming.empty()) {
    // Who starts streaming now: those whose time has come; a transfer with nothing to send (or
    // to itself) is done the moment it would start.
    if (streaming.empty() && now < result.transfers[waiting.back()].streaming)
      now = result.transfers[waiting.back()].streaming;
    while (!waiting.empty() && result.transfers[waiting.back()].streaming <= now) {
      const std::size_t i = waiting.back();
      waiting.pop_back();
      if (remaining[i] <= 0 || routes[i].links.empty()) {
        result.transfers[i].finish = now;
        continue;
      }
      streaming.push_back(i);
      for (const auto link : routes[i].links) {
        ++users[link];
        if (record_links) ++busy.try_emplace(link, link_busy{link, now, now, 0}).first->second.transfers;
      }
    }
    // Equal shares, each transfer at its bottleneck; advance to the next start or finish.
    double next = waiting.empty() ? infinity : result.transfers[waiting.back()].streaming;
    for (const auto i : streaming) {
      double share = infinity;
      for (const auto link : routes[i].links) share = std::min(share, net.bandwidth(link) / users[link]);
      rate[i] = share;
      due[i] = now + remaining[i] / share;
      next = std::min(next, due[i]);
    }
    const double step = next - now;
    now = next;
    std::erase_if(streaming, [&](std::size_t i) {
      remaining[i] -= rate[i] * step;
      // Done when due now, whatever rounding left over: a few bytes late in the run, `next - now` is
      // too coarse for the remainder to come out zero, and waiting for it would never advance. Or
      // within a relative tolerance of done, when due at `next` but rounded past it.
      if (due[i] > now && remaining[i] > transfers[i].bytes * 1e-9) return false;
      finish(i);
      if (record_links)
        for (const auto link : routes[i].links) busy[link].end = now;
      return true;
    });
  }
  result.links.reserve(busy.size());
  for (const auto& [link, entry] : busy) result.links.push_back(entry);
  std::sort(result.links.begin(), result.links.end(),
            [](const link_busy& a, const link_busy& b) { return a.link < b.link; });
  return result;
}

}  // namespace shardwise::sim
