#pragma once
// The threads backend's own collective algorithm: direct reads and writes of the peers' buffers in one
// phase, no staging copies, no messages. In an all-reduce rank r reduces chunk r of every input and
// writes the result into every rank's output, so the reduction work is spread evenly and every byte
// is read and written once; reduce-scatter has rank r reduce block r; the gathers and all-to-alls
// copy each block once, straight from the rank that holds it. Ranks are combined in order 0, 1, …,
// P − 1, so a float sum equals the serial left-to-right sum bit for bit. Large outputs are written
// with non-temporal stores (comm/detail/streaming_store.hpp), or as an all_to_all_v's caller says.
//
// perform(call, op, rank, ranks, phase) is what rank `rank` does in phase `phase` of the collective
// (comm/threads/rendezvous.hpp), reading every rank's call descriptor from `op`.
#include <algorithm>
#include <cstddef>
#include <vector>

#include "shardwise/comm/calls.hpp"
#include "shardwise/comm/detail/streaming_store.hpp"
#include "shardwise/comm/output_stores.hpp"
#include "shardwise/comm/reduction.hpp"
#include "shardwise/comm/threads/rendezvous.hpp"
#include "shardwise/core/element.hpp"

namespace shardwise::threads::detail {

// Boundary of chunk r when n elements are split over P ranks; multiples of 16 elements keep chunks
// apart by whole cache lines and vector widths.
inline std::size_t chunk_start(std::size_t n, int ranks, int r) {
  if (r >= ranks) return n;
  return std::min(n, (n * static_cast<std::size_t>(r) / static_cast<std::size_t>(ranks)) & ~std::size_t{15});
}

template <class T>
bool streams(std::size_t elements_written, output_stores stores = output_stores::by_size) {
  if (stores != output_stores::by_size) return stores == output_stores::around_caches;
  return shardwise::detail::streams_bytes(elements_written * sizeof(T));
}

// For i in [begin, end): reduces source(0)[i], …, source(P-1)[i] in rank order and writes the result to
// destination(0)[i], …, destination(D-1)[i]. A tile is read completely before it is written, so a
// destination may alias a source.
template <op Reduction, class T, class Source, class Destination>
void reduce_range(std::size_t begin, std::size_t end, int ranks, const Source& source, int destinations,
                  const Destination& destination, bool streaming) {
  using A = accumulator_t<T>;
  constexpr std::size_t tile = 1024;
  A accumulated[tile];
  T result[tile];
  for (std::size_t base = begin; base < end; base += tile) {
    const std::size_t count = std::min(tile, end - base);
    const T* first = source(0) + base;
    for (std::size_t i = 0; i < count; ++i) accumulated[i] = static_cast<A>(first[i]);
    for (int s = 1; s < ranks; ++s) {
      const T* next = source(s) + base;
      for (std::size_t i = 0; i < count; ++i)
        accumulated[i] = combine<Reduction>(accumulated[i], static_cast<A>(next[i]));
    }
    for (std::size_t i = 0; i < count; ++i) result[i] = static_cast<T>(accumulated[i]);
    for (int d = 0; d < destinations; ++d)
      shardwise::detail::store_elements(destination(d) + base, result, count, streaming);
  }
  if (streaming) shardwise::detail::finish_streaming();
}

template <class T, class Source, class Destination>
void reduce_range(op reduction, std::size_t begin, std::size_t end, int ranks, const Source& source, int destinations,
                  const Destination& destination) {
  const bool streaming = streams<T>((end - begin) * static_cast<std::size_t>(destinations));
  dispatch(reduction, [&](auto compiled) {
    reduce_range<decltype(compiled)::value, T>(begin, end, ranks, source, destinations, destination, streaming);
  });
}

// Rank r reduces chunk r of every input and writes it straight into every rank's output: inputs are
// read once and outputs written once, in a single round. Only rank r touches chunk r of any buffer,
// so in place is safe.
template <class T>
void perform(calls::all_reduce<T>& mine, const operation& op, int rank, int ranks, int) {
  const std::size_t n = mine.in.size();
  reduce_range<T>(
      mine.reduction, chunk_start(n, ranks, rank), chunk_start(n, ranks, rank + 1), ranks,
      [&](int s) { return peer<calls::all_reduce<T>>(op, s).in.data(); }, ranks,
      [&](int d) { return peer<calls::all_reduce<T>>(op, d).out.data(); });
}

template <class T>
void perform(calls::reduce<T>& mine, const operation& op, int rank, int ranks, int) {
  const std::size_t n = mine.in.size();
  T* out = peer<calls::reduce<T>>(op, mine.root).out.data();
  reduce_range<T>(
      mine.reduction, chunk_start(n, ranks, rank), chunk_start(n, ranks, rank + 1), ranks,
      [&](int s) { return peer<calls::reduce<T>>(op, s).in.data(); }, 1, [&](int) { return out; });
}

template <class T>
void perform(calls::reduce_scatter<T>& mine, const operation& op, int rank, int ranks, int) {
  const std::size_t block = mine.out.size();
  const std::size_t offset = block * static_cast<std::size_t>(rank);
  reduce_range<T>(
      mine.reduction, 0, block, ranks, [&](int s) { return peer<calls::reduce_scatter<T>>(op, s).in.data() + offset; },
      1, [&](int) { return mine.out.data(); });
}

template <class T>
void perform(calls::all_gather<T>& mine, const operation& op, int rank, int ranks, int) {
  const std::size_t block = mine.in.size();
  const bool streaming = streams<T>(mine.out.size());
  for (int k = 0; k < ranks; ++k) {
    const int s = (rank + k) % ranks;
    shardwise::detail::store_elements(mine.out.data() + block * static_cast<std::size_t>(s),
                                      peer<calls::all_gather<T>>(op, s).in.data(), block, streaming);
  }
  if (streaming) shardwise::detail::finish_streaming();
}

template <class T>
void perform(calls::all_to_all<T>& mine, const operation& op, int rank, int ranks, int) {
  const std::size_t block = mine.out.size() / static_cast<std::size_t>(ranks);
  const bool streaming = streams<T>(mine.out.size());
  for (int k = 0; k < ranks; ++k) {
    const int s = (rank + k) % ranks;
    shardwise::detail::store_elements(
        mine.out.data() + block * static_cast<std::size_t>(s),
        peer<calls::all_to_all<T>>(op, s).in.data() + block * static_cast<std::size_t>(rank), block, streaming);
  }
  if (streaming) shardwise::detail::finish_streaming();
}

template <class T>
void perform(calls::all_to_all_v<T>& mine, const operation& op, int rank, int ranks, int) {
  std::size_t received = 0;
  const bool streaming = streams<T>(mine.out.size(), mine.stores);
  for (int s = 0; s < ranks; ++s) {
    const auto& from = peer<calls::all_to_all_v<T>>(op, s);
    std::size_t offset = 0;
    for (int r = 0; r < rank; ++r) offset += static_cast<std::size_t>(from.send_counts[static_cast<std::size_t>(r)]);
    const auto count = static_cast<std::size_t>(mine.receive_counts[static_cast<std::size_t>(s)]);
    shardwise::detail::store_elements(mine.out.data() + received, from.in.data() + offset, count, streaming);
    received += count;
  }
  if (streaming) shardwise::detail::finish_streaming();
}

template <class T>
void perform(calls::broadcast<T>& mine, const operation& op, int rank, int, int) {
  if (rank == mine.root) return;
  const bool streaming = streams<T>(mine.data.size());
  shardwise::detail::store_elements(mine.data.data(), peer<calls::broadcast<T>>(op, mine.root).data.data(),
                                    mine.data.size(), streaming);
  if (streaming) shardwise::detail::finish_streaming();
}

// An in-place all-to-all overwrites blocks its peers still have to read: it reads from a copy, which
// the collective keeps until every peer has read it.
template <class T>
struct own_buffers<calls::all_to_all<T>> {
  std::vector<T> copy;
  void prepare(calls::all_to_all<T>& call) {
    if (call.in.data() != call.out.data() || call.in.empty()) return;
    copy.assign(call.in.begin(), call.in.end());
    call.in = copy;
  }
};

}  // namespace shardwise::threads::detail
