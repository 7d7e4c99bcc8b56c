#pragma once
// A result every rank needs alike, computed by one rank and broadcast: where each rank would compute the
// same thing (a prediction from a machine model, say), P ranks computing it cost P times the work.
//
//   auto arrivals = computed_on_root<double>(comm, 0, messages.size(), "deliver", [&] { return deliver(...); });
//
// Collective. `count` is the result's length, which every rank must know; the root's `compute` returns
// a std::vector<T> of exactly that length. If it throws, or returns another length, every rank throws:
// the root its own error (or an argument_error naming both lengths), the others a peer_error naming the
// root, so no rank waits for a result that will not come.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardwise/comm/communicator.hpp"
#include "shardwise/core/error.hpp"

namespace shardwise {

template <class T, communicator Comm, class Compute>
[[nodiscard]] std::vector<T> computed_on_root(Comm& comm, int root, std::size_t count, std::string_view call,
                                              Compute&& compute) {
  std::vector<T> result;
  std::int64_t computed = 1;
  if (comm.rank() == root) {
    try {
      result = std::forward<Compute>(compute)();
      if (result.size() != count)
        throw argument_error(
            comm.world_rank(), call,
            "computed " + std::to_string(result.size()) + " values where every rank expects " + std::to_string(count));
    } catch (...) {
      computed = 0;
      comm.broadcast(std::span<std::int64_t>(&computed, 1), root);
      throw;
    }
  } else {
    result.resize(count);
  }
  comm.broadcast(std::span<std::int64_t>(&computed, 1), root);
  if (computed == 0)
    throw peer_error(comm.world_rank(), call,
                     "rank " + std::to_string(root) + " failed to compute what every rank needs (its error says why)");
  comm.broadcast(std::span<T>(result), root);
  return result;
}

}  // namespace shardwise
