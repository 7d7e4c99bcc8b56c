#pragma once
// Which links join the simulated GPUs and the route a transfer takes over them.
//
// Links are directed (full duplex: a→b and b→a are two links, each with its own bandwidth). A route
// is the list of links a transfer crosses and its latency; its bandwidth is shared with the other
// transfers on those links (sim/network.hpp). Link ids are computed, not stored, so a topology of
// thousands of GPUs costs a few numbers:
//   fully_connected(P, link)     every pair has its own link (NVLink/xGMI peers, a switch without
//                                contention); id = source·P + destination
//   ring(P, link)                r ↔ r±1; routes go the shorter way round (clockwise on a tie), one
//                                latency per hop; id = r (clockwise), P + r (counter-clockwise)
//   torus_2d(rows, cols, link)   rank r at (r / cols, r % cols), wrap-around links in both
//                                dimensions, dimension-order routing (columns first, then rows),
//                                one latency per hop; id = 4r + direction
//   torus_2d(rows, cols, link, c, on_chip)
//                                c devices a chip at each place of the torus (device d on chip d / c,
//                                chips numbered as the ranks above): they share the chip's 4 links,
//                                and two devices of a chip are joined by `on_chip` links, one per
//                                ordered pair; id = 4·chips + d·c + the other's index on the chip
//   nodes(P, k, peer, network, nics)
//                                nodes of k GPUs, fully connected inside a node by `peer` links;
//                                between nodes a transfer goes up its GPU's NIC and down the
//                                destination GPU's NIC (`network` links, one latency for the
//                                crossing); GPUs share their node's `nics` NICs evenly
//   switched_nodes(P, k, port, network, nics)
//                                as nodes, but inside a node each GPU has one `port` link each way
//                                to a switch (NVSwitch): a transfer goes up its source's port and
//                                down its destination's (one latency), so a GPU's transfers to
//                                several peers at once share its port; id = 2·source (up) or
//                                2·destination + 1 (down), ids the pairs' links leave unused here
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardwise/core/error.hpp"

namespace shardwise::sim {

// One kind of link: bandwidth in bytes/s per direction, latency in seconds, a name for traces.
struct link_model {
  double bandwidth = 0;
  double latency = 0;
  std::string kind;
};

struct route {
  std::vector<std::int64_t> links;
  double latency = 0;
};

class topology {
 public:
  enum class shape { fully_connected, ring, torus_2d, nodes };

  static topology fully_connected(int devices, link_model link) {
    return topology("topology::fully_connected", shape::fully_connected, devices, std::move(link), {}, devices, 1);
  }
  static topology ring(int devices, link_model link) {
    return topology("topology::ring", shape::ring, devices, std::move(link), {}, devices, 1);
  }
  static topology torus_2d(int rows, int cols, link_model link, int devices_per_chip = 1, link_model on_chip = {}) {
    if (rows < 1 || cols < 1)
      throw argument_error(-1, "topology::torus_2d",
                           "needs positive extents, got " + std::to_string(rows) + " x " + std::to_string(cols));
    if (devices_per_chip < 1)
      throw argument_error(-1, "topology::torus_2d",
                           "needs at least one device a chip, got " + std::to_string(devices_per_chip));
    topology torus("topology::torus_2d", shape::torus_2d, rows * cols * devices_per_chip, std::move(link),
                   std::move(on_chip), cols, 1);
    torus.devices_per_chip_ = devices_per_chip;
    return torus;
  }
  static topology nodes(int devices, int gpus_per_node, link_model peer, link_model network, int nics_per_node) {
    return of_nodes("topology::nodes", devices, gpus_per_node, std::move(peer), std::move(network), nics_per_node);
  }
  static topology switched_nodes(int devices, int gpus_per_node, link_model port, link_model network,
                                 int nics_per_node) {
    topology switched = of_nodes("topology::switched_nodes", devices, gpus_per_node, std::move(port),
                                 std::move(network), nics_per_node);
    switched.switched_ = true;
    return switched;
  }

  [[nodiscard]] int devices() const noexcept { return devices_; }
  [[nodiscard]] shape kind() const noexcept { return shape_; }
  // The slower link kind is the second one only for nodes.
  [[nodiscard]] const link_model& peer_link() const noexcept { return peer_; }
  [[nodiscard]] const link_model& network_link() const noexcept { return shape_ == shape::nodes ? network_ : peer_; }
  [[nodiscard]] int gpus_per_node() const noexcept { return shape_ == shape::nodes ? width_ : devices_; }
  // Whether the GPUs of a node reach each other through a switch (a port each) rather than a link a pair.
  [[nodiscard]] bool switched() const noexcept { return switched_; }
  // A torus's columns of chips; the other shapes are one row.
  [[nodiscard]] int columns() const noexcept { return shape_ == shape::torus_2d ? width_ : devices_; }
  // Devices on each chip of a torus (1 elsewhere): they share the chip's links.
  [[nodiscard]] int devices_per_chip() const noexcept { return devices_per_chip_; }
  // The NIC (numbered across all nodes) a GPU of a node sends and receives through.
  [[nodiscard]] std::int64_t nic_of(int gpu) const noexcept {
    return static_cast<std::int64_t>(gpu / width_) * nics_per_node_ + (gpu % width_) * nics_per_node_ / width_;
  }

  // Whether the routes of two transfers between four different devices can share a link: on a ring
  // or torus (routes of several hops), and between nodes whose GPUs share a NIC.
  [[nodiscard]] bool disjoint_routes_can_meet() const noexcept {
    switch (shape_) {
      case shape::fully_connected: return false;
      case shape::nodes: return nics_per_node_ < width_;
      default: return true;
    }
  }

  [[nodiscard]] route route_between(int source, int destination) const {
    check_device(source);
    check_device(destination);
    route r;
    if (source == destination) return r;
    const std::int64_t P = devices_;
    switch (shape_) {
      case shape::fully_connected:
        r.links.push_back(source * P + destination);
        r.latency = peer_.latency;
        break;
      case shape::ring:
        ring_hops(source, destination, devices_,
                  [&](int at, bool forward) { r.links.push_back(forward ? at : P + at); });
        r.latency = peer_.latency * static_cast<double>(r.links.size());
        break;
      case shape::torus_2d: {
        const int c = devices_per_chip_;
        const int from = source / c, to = destination / c;  // chips
        if (from == to) {
          r.links.push_back(first_on_chip_link() + static_cast<std::int64_t>(source) * c + destination % c);
          r.latency = network_.latency;
          break;
        }
        const int cols = width_, rows = chips() / width_;
        const int row = from / cols, destination_row = to / cols;
        int col = from % cols;
        // Columns first along the source's row, then rows along the destination's column.
        ring_hops(col, to % cols, cols, [&](int at, bool forward) {
          r.links.push_back(4 * static_cast<std::int64_t>(row * cols + at) + (forward ? 0 : 1));
        });
        col = to % cols;
        ring_hops(row, destination_row, rows, [&](int at, bool forward) {
          r.links.push_back(4 * static_cast<std::int64_t>(at * cols + col) + (forward ? 2 : 3));
        });
        r.latency = peer_.latency * static_cast<double>(r.links.size());
        break;
      }
      case shape::nodes:
        if (source / width_ == destination / width_) {
          if (switched_) {
            r.links.push_back(2 * static_cast<std::int64_t>(source));
            r.links.push_back(2 * static_cast<std::int64_t>(destination) + 1);
          } else {
            r.links.push_back(static_cast<std::int64_t>(source) * width_ + destination % width_);
          }
          r.latency = peer_.latency;
        } else {
          r.links.push_back(nic_link(nic_of(source), true));
          r.links.push_back(nic_link(nic_of(destination), false));
          r.latency = network_.latency;
        }
        break;
    }
    return r;
  }

  [[nodiscard]] double bandwidth(std::int64_t link) const noexcept { return model_of(link).bandwidth; }

  // A name for the link's track in a trace.
  [[nodiscard]] std::string link_name(std::int64_t link) const {
    const std::int64_t P = devices_;
    auto gpu = [](std::int64_t g) { return "GPU " + std::to_string(g); };
    switch (shape_) {
      case shape::fully_connected: return gpu(link / P) + " → " + gpu(link % P) + " (" + peer_.kind + ")";
      case shape::ring: {
        const std::int64_t at = link % P, to = link < P ? (at + 1) % P : (at + P - 1) % P;
        return gpu(at) + " → " + gpu(to) + " (" + peer_.kind + ")";
      }
      case shape::torus_2d: {
        static constexpr const char* direction[] = {"+column", "-column", "+row", "-row"};
        const std::int64_t c = devices_per_chip_, on_chip = link - first_on_chip_link();
        if (on_chip >= 0)
          return gpu(on_chip / c) + " → " + gpu(on_chip / c / c * c + on_chip % c) + " (" + network_.kind + ")";
        return (c == 1 ? gpu(link / 4) : "chip " + std::to_string(link / 4)) + " " + direction[link % 4] + " (" +
               peer_.kind + ")";
      }
      case shape::nodes:
        if (switched_ && link < P * width_)
          return link % 2 == 0 ? gpu(link / 2) + " → switch (" + peer_.kind + ")"
                               : "switch → " + gpu(link / 2) + " (" + peer_.kind + ")";
        if (link < P * width_)
          return gpu(link / width_) + " → " + gpu(link / width_ / width_ * width_ + link % width_) + " (" + peer_.kind +
                 ")";
        return "NIC " + std::to_string((link - P * width_) % nics()) +
               (link - P * width_ < nics() ? " send" : " receive") + " (" + network_.kind + ")";
    }
    return "link " + std::to_string(link);
  }

 private:
  // `factory`: the call that builds it, which its errors name.
  topology(std::string_view factory, shape s, int devices, link_model peer, link_model network, int width,
           int nics_per_node)
      : shape_(s),
        devices_(devices),
        width_(width),
        nics_per_node_(nics_per_node),
        peer_(std::move(peer)),
        network_(std::move(network)) {
    if (devices < 1) throw argument_error(-1, factory, "needs at least one device, got " + std::to_string(devices));
  }
  static topology of_nodes(std::string_view factory, int devices, int gpus_per_node, link_model peer,
                           link_model network, int nics_per_node) {
    if (gpus_per_node < 1 || devices % gpus_per_node != 0)
      throw argument_error(-1, factory,
                           std::to_string(devices) + " GPUs do not fill nodes of " + std::to_string(gpus_per_node));
    if (nics_per_node < 1 || nics_per_node > gpus_per_node)
      throw argument_error(-1, factory,
                           std::to_string(nics_per_node) + " NICs per node for " + std::to_string(gpus_per_node) +
                               " GPUs per node: needs 1 to " + std::to_string(gpus_per_node));
    return topology(factory, shape::nodes, devices, std::move(peer), std::move(network), gpus_per_node, nics_per_node);
  }

  void check_device(int device) const {
    if (device < 0 || device >= devices_)
      throw argument_error(-1, "topology::route_between",
                           "device " + std::to_string(device) + " is not one of the " + std::to_string(devices_));
  }

  // Walks the shorter way from `from` to `to` on a ring of n, calling hop(position, forward) per hop.
  template <class Hop>
  static void ring_hops(int from, int to, int n, Hop&& hop) {
    const int forward = ((to - from) % n + n) % n;
    const bool clockwise = forward <= n - forward;
    for (int at = from, left = clockwise ? forward : n - forward; left > 0; --left) {
      hop(at, clockwise);
      at = clockwise ? (at + 1) % n : (at + n - 1) % n;
    }
  }

  [[nodiscard]] std::int64_t nics() const noexcept {
    return static_cast<std::int64_t>(devices_ / width_) * nics_per_node_;
  }
  [[nodiscard]] std::int64_t nic_link(std::int64_t nic, bool send) const noexcept {
    return static_cast<std::int64_t>(devices_) * width_ + (send ? 0 : nics()) + nic;
  }
  [[nodiscard]] int chips() const noexcept { return devices_ / devices_per_chip_; }
  // A torus's links between the devices of a chip come after the chips' four each.
  [[nodiscard]] std::int64_t first_on_chip_link() const noexcept { return 4 * static_cast<std::int64_t>(chips()); }
  [[nodiscard]] const link_model& model_of(std::int64_t link) const noexcept {
    switch (shape_) {
      case shape::nodes: return link >= static_cast<std::int64_t>(devices_) * width_ ? network_ : peer_;
      case shape::torus_2d: return link >= first_on_chip_link() ? network_ : peer_;
      default: return peer_;
    }
  }

  shape shape_;
  int devices_;
  int width_;  // columns of the torus, GPUs per node
  int nics_per_node_;
  int devices_per_chip_ = 1;
  bool switched_ = false;  // nodes: a port a GPU to a switch instead of a link a pair
  link_model peer_;
  link_model network_;  // between nodes; on a torus, between the devices of a chip
};

}  // namespace shardwise::sim
