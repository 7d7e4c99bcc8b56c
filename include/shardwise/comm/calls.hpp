#pragma once
// One descriptor per collective: the arguments of a call as plain data. Backends implement
// `run(call)` (blocking) and `start(call)` (non-blocking, returns a request) for each; the
// communicator interface builds them from user arguments and checks them once for every backend.
// In-place forms are the same descriptors with aliasing spans (see each call's comment).
#include <span>
#include <string_view>

#include "shardwise/comm/output_stores.hpp"
#include "shardwise/comm/reduction.hpp"

namespace shardwise::calls {

// out[i] = reduce over ranks of in[i]. In place when in.data() == out.data().
template <class T>
struct all_reduce {
  static constexpr std::string_view name = "all_reduce";
  std::span<const T> in;
  std::span<T> out;
  op reduction = op::sum;
};

// Like all_reduce, but only root receives; out is empty on other ranks.
template <class T>
struct reduce {
  static constexpr std::string_view name = "reduce";
  std::span<const T> in;
  std::span<T> out;
  op reduction = op::sum;
  int root = 0;
};

// in holds size() equal blocks; rank r receives the reduction of block r. In place when out is
// block rank() of in (out.data() == in.data() + rank() * out.size()).
template <class T>
struct reduce_scatter {
  static constexpr std::string_view name = "reduce_scatter";
  std::span<const T> in;
  std::span<T> out;
  op reduction = op::sum;
};

// out is size() blocks of in.size(), block r from rank r. In place when in is block rank() of out.
template <class T>
struct all_gather {
  static constexpr std::string_view name = "all_gather";
  std::span<const T> in;
  std::span<T> out;
};

// Block r of in goes to rank r, landing as block rank() of its out. In place when in.data() == out.data().
template <class T>
struct all_to_all {
  static constexpr std::string_view name = "all_to_all";
  std::span<const T> in;
  std::span<T> out;
};

// Uneven all-to-all: send_counts[r] elements go to rank r, receive_counts[r] come from rank r; blocks
// are packed back to back in rank order on both sides. `stores`: this rank's, where its backend writes
// out itself.
template <class T>
struct all_to_all_v {
  static constexpr std::string_view name = "all_to_all_v";
  std::span<const T> in;
  std::span<const int> send_counts;
  std::span<T> out;
  std::span<const int> receive_counts;
  output_stores stores = output_stores::by_size;
};

template <class T>
struct broadcast {
  static constexpr std::string_view name = "broadcast";
  std::span<T> data;
  int root = 0;
};

template <class T>
struct send {
  static constexpr std::string_view name = "send";
  std::span<const T> data;
  int destination = 0;
  int tag = 0;
};

template <class T>
struct recv {
  static constexpr std::string_view name = "recv";
  std::span<T> data;
  int source = 0;
  int tag = 0;
};

struct barrier {
  static constexpr std::string_view name = "barrier";
};

// split(color, key) is each backend's own (it makes a communicator); its ranks agree on having called
// it like on any collective (comm/agreement.hpp), and this names it there.
struct split {
  static constexpr std::string_view name = "split";
};

}  // namespace shardwise::calls
