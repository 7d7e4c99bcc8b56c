#pragma once
// The collectives run by a chosen algorithm (pattern.hpp) on any communicator, through its public
// isend and irecv: the same code moves the data on threads, MPI and simulated GPUs.
//
//   shardwise::algorithms::all_reduce(comm, gradients, sums, shardwise::op::sum, shardwise::algorithm::ring);
//
// Every rank calls with the same algorithm and sizes, as for the communicator's own collectives. Each
// step posts this rank's receive and send, waits for both, then reduces what arrived (held in a
// scratch buffer) into its own data. Messages carry tags from first_tag on, one per step, so a step's
// messages never match another step's; ranks must not use these tags themselves while a collective of
// this header runs on the same communicator.
#include <algorithm>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "shardwise/comm/algorithms/pattern.hpp"
#include "shardwise/comm/communicator.hpp"
#include "shardwise/comm/reduction.hpp"
#include "shardwise/core/element.hpp"
#include "shardwise/core/error.hpp"

namespace shardwise::algorithms {

inline constexpr int first_tag = 1 << 14;  // tags first_tag … 2·first_tag − 1 (MPI guarantees 32767)

namespace detail {

[[nodiscard]] constexpr int tag_of(int step, int channel, int channels) noexcept {
  return first_tag + (step * channels + channel) % first_tag;
}

template <class T>
void reduce_into(std::span<T> mine, std::span<const T> arrived, op reduction) {
  using A = accumulator_t<T>;
  dispatch(reduction, [&](auto compiled) {
    for (std::size_t i = 0; i < mine.size(); ++i)
      mine[i] = static_cast<T>(combine<decltype(compiled)::value>(static_cast<A>(mine[i]), static_cast<A>(arrived[i])));
  });
}

// Plays every step of `steps` on this rank: sent parts are read from `source`, received parts written
// (or reduced) into `target`. In a step, every exchange's receive and send (one per channel, or per
// peer in the direct all-to-all) are posted before any is waited for, so they travel at once.
template <class T, communicator C>
void play(C& comm, const pattern<std::size_t>& steps, std::span<const T> source, std::span<T> target,
          op reduction = op::sum) {
  const int per_step = steps.exchanges_per_step();
  const auto channels = static_cast<std::size_t>(per_step);
  std::vector<rank_exchange<std::size_t>> exchanges(channels);
  std::vector<std::vector<T>> arrived(channels);
  std::vector<std::optional<typename C::request>> receiving(channels), sending(channels);
  for (int k = 0; k < steps.steps(); ++k) {
    for (std::size_t c = 0; c < channels; ++c) {
      const auto& e = exchanges[c] = steps.exchange(comm.rank(), k, static_cast<int>(c));
      const int tag = tag_of(k, static_cast<int>(c), per_step);
      if (e.receive_from >= 0) {
        if (e.reduce) arrived[c].resize(e.received.count);
        receiving[c].emplace(
            comm.irecv(e.reduce ? std::span<T>(arrived[c]) : target.subspan(e.received.offset, e.received.count),
                       e.receive_from, tag));
      }
      if (e.send_to >= 0) sending[c].emplace(comm.isend(source.subspan(e.sent.offset, e.sent.count), e.send_to, tag));
    }
    for (std::size_t c = 0; c < channels; ++c) {
      if (sending[c]) sending[c]->wait();
      sending[c].reset();
      if (!receiving[c]) continue;
      receiving[c]->wait();
      receiving[c].reset();
      if constexpr (reducible<T>) {
        const auto& e = exchanges[c];
        if (e.reduce) reduce_into<T>(target.subspan(e.received.offset, e.received.count), arrived[c], reduction);
      }
    }
  }
}

template <class In, class Out, bool Reducing>
constexpr void elements_fit() {
  shardwise::detail::same_elements<In, Out>();
  if constexpr (Reducing) shardwise::detail::reducible_elements<reducible<element_of<In>>>();
}

template <communicator C>
void require(const C& comm, std::string_view operation, bool holds, const std::string& otherwise) {
  if (!holds) throw argument_error(comm.world_rank(), operation, otherwise);
}

// The algorithm as the caller chose it: "ring", "hierarchical in nodes of 4", "ring in 2 channels",
// "ring in nodes of 4, in 8 channels".
inline std::string chosen_text(algorithm chosen, placement where = {}, int channels = 1) {
  std::string text(name_of(chosen));
  const bool placed = chosen == algorithm::hierarchical || (chosen == algorithm::ring && channels > 2);
  if (placed) text += " in nodes of " + std::to_string(where.ranks_per_node);
  if (channels != 1) text += (placed ? ", in " : " in ") + std::to_string(channels) + " channels";
  return text;
}

template <communicator C>
void require_algorithm(const C& comm, std::string_view operation, collective kind, algorithm chosen,
                       placement where = {}, int channels = 1) {
  require(comm, operation, applies(kind, chosen, comm.size(), where, channels),
          chosen_text(chosen, where, channels) + " is not an algorithm for " + std::string(name_of(kind)) + " on " +
              std::to_string(comm.size()) + " ranks");
}

template <communicator C>
void require_root(const C& comm, std::string_view operation, int root) {
  require(comm, operation, root >= 0 && root < comm.size(),
          "root " + std::to_string(root) + " is not a rank of this communicator (size " + std::to_string(comm.size()) +
              ")");
}

inline std::string sizes(std::string_view what_in, std::size_t in, std::string_view what_out, std::size_t out) {
  return std::string(what_in) + " has " + std::to_string(in) + " elements, " + std::string(what_out) + " has " +
         std::to_string(out);
}

// The segments `chosen` cuts `data` into (pipelined_chain::segments), once `segment_bytes` is checked.
template <communicator C, class T>
[[nodiscard]] int segments_of(const C& comm, std::string_view operation, algorithm chosen, std::span<T> data,
                              double segment_bytes) {
  require(comm, operation, segment_bytes > 0, "segments of " + std::to_string(segment_bytes) + " bytes");
  return pipelined_chain::segments(chosen, static_cast<double>(data.size_bytes()), segment_bytes);
}

template <class T>
void copy_unless_same(std::span<const T> from, std::span<T> to) {
  if (from.data() != to.data()) std::copy(from.begin(), from.end(), to.begin());
}

}  // namespace detail

// out = the reduction of every rank's `in` (in and out may be the same buffer). `where` places the
// ranks in nodes for the hierarchical algorithm and for rings in more than 2 channels (the others
// ignore it); `channels` splits the data among rings run at once (pattern.hpp; for the ring 2, or in
// nodes of k up to 2·k, at most 16; 2 or 4 for the hierarchical algorithm).
template <communicator C, input_buffer In, output_buffer Out>
void all_reduce(C& comm, In&& in, Out&& out, op reduction, algorithm chosen, placement where = {},
                int channels = 1) try {
  constexpr std::string_view operation = "algorithms::all_reduce";
  detail::elements_fit<In, Out, true>();
  const auto source = read_span(in);
  const auto target = write_span(out);
  detail::require_algorithm(comm, operation, collective::all_reduce, chosen, where, channels);
  detail::require(comm, operation, source.size() == target.size(),
                  detail::sizes("input", source.size(), "output", target.size()));
  detail::copy_unless_same(source, target);
  detail::play<element_of<Out>>(comm,
                                {collective::all_reduce, chosen, comm.size(), target.size(), 0, 1, where, channels},
                                target, target, reduction);
} catch (...) {
  rethrow_within_call(comm.world_rank(),
                      call_text("algorithms::all_reduce", detail::chosen_text(chosen, where, channels),
                                std::string(name_of(reduction))));
}

// out = block rank() of the reduction of every rank's `in` (size() blocks of out.size()); the ring
// runs in `channels`, more than 2 of them rotated in the nodes `where` gives, as all_reduce's do.
template <communicator C, input_buffer In, output_buffer Out>
void reduce_scatter(C& comm, In&& in, Out&& out, op reduction, algorithm chosen, placement where = {},
                    int channels = 1) try {
  constexpr std::string_view operation = "algorithms::reduce_scatter";
  detail::elements_fit<In, Out, true>();
  const auto source = read_span(in);
  const auto target = write_span(out);
  detail::require_algorithm(comm, operation, collective::reduce_scatter, chosen, where, channels);
  const auto ranks = static_cast<std::size_t>(comm.size());
  detail::require(
      comm, operation, source.size() == ranks * target.size(),
      detail::sizes("input", source.size(), "output", target.size()) + ", not 1/" + std::to_string(ranks) + " of it");
  std::vector<element_of<Out>> work(source.begin(), source.end());
  detail::play<element_of<Out>>(comm,
                                {collective::reduce_scatter, chosen, comm.size(), work.size(), 0, 1, where, channels},
                                work, work, reduction);
  const auto own = part_of(work.size(), comm.size(), comm.rank());
  std::copy_n(work.begin() + static_cast<std::ptrdiff_t>(own.offset), own.count, target.begin());
} catch (...) {
  rethrow_within_call(comm.world_rank(),
                      call_text("algorithms::reduce_scatter", detail::chosen_text(chosen, where, channels),
                                std::string(name_of(reduction))));
}

// out = every rank's `in`, in rank order (`in` may be block rank() of out); the ring runs in
// `channels`, as reduce_scatter's does.
template <communicator C, input_buffer In, output_buffer Out>
void all_gather(C& comm, In&& in, Out&& out, algorithm chosen, placement where = {}, int channels = 1) try {
  constexpr std::string_view operation = "algorithms::all_gather";
  detail::elements_fit<In, Out, false>();
  const auto source = read_span(in);
  const auto target = write_span(out);
  detail::require_algorithm(comm, operation, collective::all_gather, chosen, where, channels);
  const auto ranks = static_cast<std::size_t>(comm.size());
  detail::require(comm, operation, target.size() == ranks * source.size(),
                  detail::sizes("input", source.size(), "output", target.size()) + ", not " + std::to_string(ranks) +
                      " times as many");
  detail::copy_unless_same(source,
                           target.subspan(static_cast<std::size_t>(comm.rank()) * source.size(), source.size()));
  detail::play<element_of<Out>>(
      comm, {collective::all_gather, chosen, comm.size(), target.size(), 0, 1, where, channels}, target, target);
} catch (...) {
  rethrow_within_call(comm.world_rank(),
                      call_text("algorithms::all_gather", detail::chosen_text(chosen, where, channels)));
}

// Block d of `in` goes to rank d, where it becomes block rank() of out (in and out may be the same).
template <communicator C, input_buffer In, output_buffer Out>
void all_to_all(C& comm, In&& in, Out&& out, algorithm chosen) try {
  constexpr std::string_view operation = "algorithms::all_to_all";
  detail::elements_fit<In, Out, false>();
  using T = element_of<Out>;
  const auto target = write_span(out);
  detail::require_algorithm(comm, operation, collective::all_to_all, chosen);
  const auto ranks = static_cast<std::size_t>(comm.size());
  detail::require(comm, operation, read_span(in).size() == target.size() && target.size() % ranks == 0,
                  detail::sizes("input", read_span(in).size(), "output", target.size()) + " (equal multiples of " +
                      std::to_string(ranks) + " needed)");
  std::span<const T> source = read_span(in);
  const bool in_place = source.data() == target.data();
  const std::vector<T> copy = in_place ? std::vector<T>(source.begin(), source.end()) : std::vector<T>{};
  if (in_place) source = copy;
  const auto own = part_of(target.size(), comm.size(), comm.rank());
  std::copy_n(source.begin() + static_cast<std::ptrdiff_t>(own.offset), own.count,
              target.begin() + static_cast<std::ptrdiff_t>(own.offset));
  detail::play<T>(comm, {collective::all_to_all, chosen, comm.size(), target.size()}, source, target);
} catch (...) {
  rethrow_within_call(comm.world_rank(), call_text("algorithms::all_to_all", std::string(name_of(chosen))));
}

// Every rank's `data` = the root's. The pipelined chain cuts it into segments of at most
// `segment_bytes`.
template <communicator C, output_buffer Data>
void broadcast(C& comm, Data&& data, int root, algorithm chosen, double segment_bytes = 1 << 20) try {
  constexpr std::string_view operation = "algorithms::broadcast";
  const auto target = write_span(data);
  detail::require_algorithm(comm, operation, collective::broadcast, chosen);
  detail::require_root(comm, operation, root);
  detail::play<element_of<Data>>(comm,
                                 {collective::broadcast, chosen, comm.size(), target.size(), root,
                                  detail::segments_of(comm, operation, chosen, target, segment_bytes)},
                                 target, target);
} catch (...) {
  rethrow_within_call(comm.world_rank(),
                      call_text("algorithms::broadcast", std::string(name_of(chosen)), "root " + std::to_string(root)));
}

// At the root, out = the reduction of every rank's `in` (out is not touched elsewhere and may be empty).
// The pipelined chain cuts it into segments of at most `segment_bytes`.
template <communicator C, input_buffer In, output_buffer Out>
void reduce(C& comm, In&& in, Out&& out, op reduction, int root, algorithm chosen, double segment_bytes = 1 << 20) try {
  constexpr std::string_view operation = "algorithms::reduce";
  detail::elements_fit<In, Out, true>();
  const auto source = read_span(in);
  const auto target = write_span(out);
  detail::require_algorithm(comm, operation, collective::reduce, chosen);
  detail::require_root(comm, operation, root);
  detail::require(comm, operation, comm.rank() != root || source.size() == target.size(),
                  detail::sizes("input", source.size(), "output at the root", target.size()));
  const int segments = detail::segments_of(comm, operation, chosen, source, segment_bytes);
  std::vector<element_of<Out>> work(source.begin(), source.end());
  detail::play<element_of<Out>>(comm, {collective::reduce, chosen, comm.size(), work.size(), root, segments}, work,
                                work, reduction);
  if (comm.rank() == root) std::copy(work.begin(), work.end(), target.begin());
} catch (...) {
  rethrow_within_call(comm.world_rank(), call_text("algorithms::reduce", std::string(name_of(chosen)),
                                                   std::string(name_of(reduction)), "root " + std::to_string(root)));
}

// Returns on every rank once every rank has called it.
template <communicator C>
void barrier(C& comm, algorithm chosen = algorithm::dissemination) try {
  detail::require_algorithm(comm, "algorithms::barrier", collective::barrier, chosen);
  detail::play<std::byte>(comm, {collective::barrier, chosen, comm.size(), 0}, {}, {});
} catch (...) {
  rethrow_within_call(comm.world_rank(), call_text("algorithms::barrier", std::string(name_of(chosen))));
}

}  // namespace shardwise::algorithms
