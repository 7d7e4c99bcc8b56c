#pragma once
// Argument checks every backend shares: what one rank can see wrong in its own call. Cross-rank
// disagreements (different sizes on different ranks) are caught where the backend can see them.
#include <cstddef>
#include <numeric>
#include <string>

#include "shardwise/comm/calls.hpp"
#include "shardwise/core/error.hpp"

namespace shardwise::checks {

namespace detail {
inline std::string sizes(std::string_view what_in, std::size_t in, std::string_view what_out, std::size_t out) {
  return std::string(what_in) + " has " + std::to_string(in) + " elements, " + std::string(what_out) + " has " +
         std::to_string(out);
}
template <class Call>
[[noreturn]] void fail(int world_rank, const std::string& detail) {
  throw argument_error(world_rank, Call::name, detail);
}
template <class Call>
void check_rank(int world_rank, std::string_view role, int value, int size) {
  if (value < 0 || value >= size) {
    fail<Call>(world_rank, std::string(role) + " " + std::to_string(value) +
                               " is not a rank of this communicator (size " + std::to_string(size) + ")");
  }
}
template <class Call>
std::size_t check_counts(int world_rank, std::string_view role, std::span<const int> counts, int size) {
  if (counts.size() != static_cast<std::size_t>(size)) {
    fail<Call>(world_rank, std::string(role) + " has " + std::to_string(counts.size()) +
                               " entries, the communicator has " + std::to_string(size) + " ranks");
  }
  std::size_t total = 0;
  for (std::size_t r = 0; r < counts.size(); ++r) {
    if (counts[r] < 0) {
      fail<Call>(world_rank,
                 std::string(role) + "[" + std::to_string(r) + "] is negative (" + std::to_string(counts[r]) + ")");
    }
    total += static_cast<std::size_t>(counts[r]);
  }
  return total;
}
}  // namespace detail

// `rank` is this rank in the communicator, `world_rank` the one errors are reported with.
template <class T>
void validate(const calls::all_reduce<T>& call, int, int, int world_rank) {
  if (call.in.size() != call.out.size())
    detail::fail<calls::all_reduce<T>>(world_rank, detail::sizes("input", call.in.size(), "output", call.out.size()));
}

template <class T>
void validate(const calls::reduce<T>& call, int rank, int size, int world_rank) {
  detail::check_rank<calls::reduce<T>>(world_rank, "root", call.root, size);
  if (rank == call.root && call.in.size() != call.out.size())
    detail::fail<calls::reduce<T>>(world_rank,
                                   detail::sizes("input", call.in.size(), "output at the root", call.out.size()));
}

template <class T>
void validate(const calls::reduce_scatter<T>& call, int, int size, int world_rank) {
  if (call.in.size() != call.out.size() * static_cast<std::size_t>(size))
    detail::fail<calls::reduce_scatter<T>>(
        world_rank, detail::sizes("input", call.in.size(), "output", call.out.size()) +
                        "; the input must be exactly size() = " + std::to_string(size) + " output blocks");
}

template <class T>
void validate(const calls::all_gather<T>& call, int, int size, int world_rank) {
  if (call.out.size() != call.in.size() * static_cast<std::size_t>(size))
    detail::fail<calls::all_gather<T>>(world_rank, detail::sizes("input", call.in.size(), "output", call.out.size()) +
                                                       "; the output must be exactly size() = " + std::to_string(size) +
                                                       " input blocks");
}

template <class T>
void validate(const calls::all_to_all<T>& call, int, int size, int world_rank) {
  if (call.in.size() != call.out.size() || call.in.size() % static_cast<std::size_t>(size) != 0)
    detail::fail<calls::all_to_all<T>>(world_rank,
                                       detail::sizes("input", call.in.size(), "output", call.out.size()) +
                                           "; both must be equal and divisible by size() = " + std::to_string(size));
}

template <class T>
void validate(const calls::all_to_all_v<T>& call, int, int size, int world_rank) {
  using call_type = calls::all_to_all_v<T>;
  const auto sent = detail::check_counts<call_type>(world_rank, "send_counts", call.send_counts, size);
  const auto received = detail::check_counts<call_type>(world_rank, "receive_counts", call.receive_counts, size);
  if (sent != call.in.size())
    detail::fail<call_type>(world_rank, "input has " + std::to_string(call.in.size()) +
                                            " elements, send_counts sum to " + std::to_string(sent));
  if (received != call.out.size())
    detail::fail<call_type>(world_rank, "output has " + std::to_string(call.out.size()) +
                                            " elements, receive_counts sum to " + std::to_string(received));
}

template <class T>
void validate(const calls::broadcast<T>& call, int, int size, int world_rank) {
  detail::check_rank<calls::broadcast<T>>(world_rank, "root", call.root, size);
}

template <class T>
void validate(const calls::send<T>& call, int, int size, int world_rank) {
  detail::check_rank<calls::send<T>>(world_rank, "destination", call.destination, size);
  if (call.tag < 0) detail::fail<calls::send<T>>(world_rank, "tag " + std::to_string(call.tag) + " is negative");
}

template <class T>
void validate(const calls::recv<T>& call, int, int size, int world_rank) {
  detail::check_rank<calls::recv<T>>(world_rank, "source", call.source, size);
  if (call.tag < 0) detail::fail<calls::recv<T>>(world_rank, "tag " + std::to_string(call.tag) + " is negative");
}

inline void validate(const calls::barrier&, int, int, int) {}

}  // namespace shardwise::checks

namespace shardwise::checks {

// In-place forms split one buffer into size() equal blocks.
template <class Call>
void check_divisible(int world_rank, std::size_t elements, int size) {
  if (elements % static_cast<std::size_t>(size) != 0)
    detail::fail<Call>(world_rank, "the in-place buffer has " + std::to_string(elements) +
                                       " elements, not divisible into size() = " + std::to_string(size) + " blocks");
}

}  // namespace shardwise::checks
