#pragma once
// The user-facing collective API, written once for every backend (CRTP). It accepts any contiguous
// range (std::vector, std::array, std::span, Eigen maps through spans), checks the arguments, builds a
// calls:: descriptor and hands it to the backend's run(call) or start(call) (comm/detail/backend_hooks.hpp).
#include <cstddef>
#include <ranges>
#include <span>
#include <type_traits>

#include "shardwise/comm/calls.hpp"
#include "shardwise/comm/checks.hpp"
#include "shardwise/comm/detail/backend_hooks.hpp"
#include "shardwise/comm/traffic.hpp"
#include "shardwise/core/element.hpp"

namespace shardwise {

template <class R>
concept input_buffer = std::ranges::contiguous_range<R> && std::ranges::sized_range<R>;

template <class R>
concept output_buffer = input_buffer<R> && !std::is_const_v<std::remove_reference_t<std::ranges::range_reference_t<R>>>;

template <class R>
using element_of = std::remove_cv_t<std::ranges::range_value_t<R>>;

namespace detail {

// The calls that combine the ranks' elements with an op, the one list of them: their elements must be
// reducible, where the other calls' need only travel as bytes.
template <class Call>
inline constexpr bool reduces = false;
template <class T>
inline constexpr bool reduces<calls::all_reduce<T>> = true;
template <class T>
inline constexpr bool reduces<calls::reduce<T>> = true;
template <class T>
inline constexpr bool reduces<calls::reduce_scatter<T>> = true;

// Whether a call's elements are ones it can carry: reducible ones for the reductions, trivially
// copyable ones for the rest. Where they are not, the call's static_assert has said so in words, and
// the call goes no further, so that the backend is not instantiated for them: its insides would only
// add errors after that one (five, and 170 lines, for an all_reduce of short on threads).
template <class Call>
inline constexpr bool carries_its_elements = true;  // a barrier
template <template <class> class Call, class T>
inline constexpr bool carries_its_elements<Call<T>> = reduces<Call<T>> ? reducible<T> : communicable<T>;

// The collectives' refusals of their buffers' elements, each message written once (the interface's
// calls and the algorithms' own, comm/algorithms/collectives.hpp).
template <class In, class Out>
constexpr void same_elements() {
  static_assert(std::is_same_v<element_of<In>, element_of<Out>>,
                "shardwise: the input and output buffers of a collective must have the same element type");
}
template <bool Reducible>
constexpr void reducible_elements() {
  static_assert(Reducible,
                "shardwise: reductions are defined on float, double, std::int32_t, std::int64_t and bf16 only");
}
template <bool Communicable>
constexpr void communicable_elements() {
  static_assert(Communicable,
                "shardwise: collectives move elements as bytes, so the element type must be trivially copyable");
}

}  // namespace detail

template <class R>
[[nodiscard]] std::span<const element_of<R>> read_span(R&& range) {
  return {std::ranges::data(range), std::ranges::size(range)};
}
template <class R>
[[nodiscard]] std::span<element_of<R>> write_span(R&& range) {
  return {std::ranges::data(range), std::ranges::size(range)};
}

template <class Backend>
class communicator_interface {
  // The call's static_assert on its elements (detail::carries_its_elements), in the words for its kind.
  template <class Call>
  static constexpr void carried_elements() {
    if constexpr (detail::reduces<Call>) {
      detail::reducible_elements<detail::carries_its_elements<Call>>();
    } else {
      detail::communicable_elements<detail::carries_its_elements<Call>>();
    }
  }

 public:
  // ---- all_reduce
  template <input_buffer In, output_buffer Out>
  void all_reduce(In&& in, Out&& out, op reduction = op::sum) {
    execute(make_all_reduce(in, out, reduction));
  }
  template <output_buffer InOut>
  void all_reduce(InOut&& in_out, op reduction = op::sum) {
    execute(make_all_reduce(in_out, in_out, reduction));
  }
  template <input_buffer In, output_buffer Out>
  [[nodiscard]] auto iall_reduce(In&& in, Out&& out, op reduction = op::sum) {
    return begin(make_all_reduce(in, out, reduction));
  }
  template <output_buffer InOut>
  [[nodiscard]] auto iall_reduce(InOut&& in_out, op reduction = op::sum) {
    return begin(make_all_reduce(in_out, in_out, reduction));
  }

  // ---- reduce: out is read only at root (may be empty elsewhere)
  template <input_buffer In, output_buffer Out>
  void reduce(In&& in, Out&& out, op reduction, int root) {
    execute(make_reduce(in, out, reduction, root));
  }
  template <output_buffer InOut>
  void reduce(InOut&& in_out, op reduction, int root) {
    execute(make_reduce(in_out, in_out, reduction, root));
  }
  template <input_buffer In, output_buffer Out>
  [[nodiscard]] auto ireduce(In&& in, Out&& out, op reduction, int root) {
    return begin(make_reduce(in, out, reduction, root));
  }
  template <output_buffer InOut>
  [[nodiscard]] auto ireduce(InOut&& in_out, op reduction, int root) {
    return begin(make_reduce(in_out, in_out, reduction, root));
  }

  // ---- reduce_scatter: in is size() blocks of out.size(); in place, the result is block rank()
  template <input_buffer In, output_buffer Out>
  void reduce_scatter(In&& in, Out&& out, op reduction = op::sum) {
    execute(make_reduce_scatter(in, out, reduction));
  }
  template <output_buffer InOut>
  void reduce_scatter(InOut&& in_out, op reduction = op::sum) {
    execute(make_reduce_scatter_in_place(in_out, reduction));
  }
  template <input_buffer In, output_buffer Out>
  [[nodiscard]] auto ireduce_scatter(In&& in, Out&& out, op reduction = op::sum) {
    return begin(make_reduce_scatter(in, out, reduction));
  }
  template <output_buffer InOut>
  [[nodiscard]] auto ireduce_scatter(InOut&& in_out, op reduction = op::sum) {
    return begin(make_reduce_scatter_in_place(in_out, reduction));
  }

  // ---- all_gather: out is size() blocks of in.size(); in place, this rank's block is block rank()
  template <input_buffer In, output_buffer Out>
  void all_gather(In&& in, Out&& out) {
    execute(make_all_gather(in, out));
  }
  template <output_buffer InOut>
  void all_gather(InOut&& in_out) {
    execute(make_all_gather_in_place(in_out));
  }
  template <input_buffer In, output_buffer Out>
  [[nodiscard]] auto iall_gather(In&& in, Out&& out) {
    return begin(make_all_gather(in, out));
  }
  template <output_buffer InOut>
  [[nodiscard]] auto iall_gather(InOut&& in_out) {
    return begin(make_all_gather_in_place(in_out));
  }

  // ---- all_to_all: block r of in goes to rank r
  template <input_buffer In, output_buffer Out>
  void all_to_all(In&& in, Out&& out) {
    execute(make_all_to_all(in, out));
  }
  template <output_buffer InOut>
  void all_to_all(InOut&& in_out) {
    execute(make_all_to_all(in_out, in_out));
  }
  template <input_buffer In, output_buffer Out>
  [[nodiscard]] auto iall_to_all(In&& in, Out&& out) {
    return begin(make_all_to_all(in, out));
  }
  template <output_buffer InOut>
  [[nodiscard]] auto iall_to_all(InOut&& in_out) {
    return begin(make_all_to_all(in_out, in_out));
  }

  // ---- all_to_all_v: uneven blocks, packed in rank order on both sides; `stores`: how this rank's
  // output is stored where the backend writes it itself (comm/output_stores.hpp)
  template <input_buffer In, output_buffer Out>
  void all_to_all_v(In&& in, std::span<const int> send_counts, Out&& out, std::span<const int> receive_counts,
                    output_stores stores = output_stores::by_size) {
    execute(make_all_to_all_v(in, send_counts, out, receive_counts, stores));
  }
  template <input_buffer In, output_buffer Out>
  [[nodiscard]] auto iall_to_all_v(In&& in, std::span<const int> send_counts, Out&& out,
                                   std::span<const int> receive_counts, output_stores stores = output_stores::by_size) {
    return begin(make_all_to_all_v(in, send_counts, out, receive_counts, stores));
  }

  // ---- broadcast
  template <output_buffer Data>
  void broadcast(Data&& data, int root) {
    execute(make_broadcast(data, root));
  }
  template <output_buffer Data>
  [[nodiscard]] auto ibroadcast(Data&& data, int root) {
    return begin(make_broadcast(data, root));
  }

  // ---- point to point; messages between one pair of ranks with one tag arrive in order
  template <input_buffer Data>
  void send(Data&& data, int destination, int tag = 0) {
    execute(make_send(data, destination, tag));
  }
  template <input_buffer Data>
  [[nodiscard]] auto isend(Data&& data, int destination, int tag = 0) {
    return begin(make_send(data, destination, tag));
  }
  template <output_buffer Data>
  void recv(Data&& data, int source, int tag = 0) {
    execute(make_recv(data, source, tag));
  }
  template <output_buffer Data>
  [[nodiscard]] auto irecv(Data&& data, int source, int tag = 0) {
    return begin(make_recv(data, source, tag));
  }

  // ---- barrier
  void barrier() { execute(calls::barrier{}); }
  [[nodiscard]] auto ibarrier() { return begin(calls::barrier{}); }

  // ---- accounting: the calls issued through this communicator so far and this rank's bytes
  [[nodiscard]] const traffic_count& traffic() const noexcept { return traffic_; }

 private:
  Backend& self() { return static_cast<Backend&>(*this); }

  template <class Call>
  void execute(const Call& call) {
    carried_elements<Call>();
    if constexpr (detail::carries_its_elements<Call>) {
      admit(call);
      detail::backend_hooks::run(self(), call);
    }
  }
  template <class Call>
  auto begin(const Call& call) {
    carried_elements<Call>();
    if constexpr (detail::carries_its_elements<Call>) {
      admit(call);
      return detail::backend_hooks::start(self(), call);
    } else {
      return typename Backend::request{};
    }
  }
  // Counted once the arguments are known good, whether the call then succeeds or not.
  template <class Call>
  void admit(const Call& call) {
    checks::validate(call, self().rank(), self().size(), self().world_rank());
    traffic_ += traffic_of(call, self().rank(), self().size());
  }

  template <class In, class Out>
  auto make_all_reduce(In&& in, Out&& out, op reduction) {
    detail::same_elements<In, Out>();
    return calls::all_reduce<element_of<In>>{read_span(in), write_span(out), reduction};
  }
  template <class In, class Out>
  auto make_reduce(In&& in, Out&& out, op reduction, int root) {
    detail::same_elements<In, Out>();
    return calls::reduce<element_of<In>>{read_span(in), write_span(out), reduction, root};
  }
  template <class In, class Out>
  auto make_reduce_scatter(In&& in, Out&& out, op reduction) {
    detail::same_elements<In, Out>();
    return calls::reduce_scatter<element_of<In>>{read_span(in), write_span(out), reduction};
  }
  template <class InOut>
  auto make_reduce_scatter_in_place(InOut&& in_out, op reduction) {
    using call = calls::reduce_scatter<element_of<InOut>>;
    const auto whole = write_span(in_out);
    checks::check_divisible<call>(self().world_rank(), whole.size(), self().size());
    return call{whole, own_block(whole), reduction};
  }
  template <class In, class Out>
  auto make_all_gather(In&& in, Out&& out) {
    detail::same_elements<In, Out>();
    return calls::all_gather<element_of<In>>{read_span(in), write_span(out)};
  }
  template <class InOut>
  auto make_all_gather_in_place(InOut&& in_out) {
    using call = calls::all_gather<element_of<InOut>>;
    const auto whole = write_span(in_out);
    checks::check_divisible<call>(self().world_rank(), whole.size(), self().size());
    return call{own_block(whole), whole};
  }
  template <class In, class Out>
  auto make_all_to_all(In&& in, Out&& out) {
    detail::same_elements<In, Out>();
    return calls::all_to_all<element_of<In>>{read_span(in), write_span(out)};
  }
  template <class In, class Out>
  auto make_all_to_all_v(In&& in, std::span<const int> send_counts, Out&& out, std::span<const int> receive_counts,
                         output_stores stores) {
    detail::same_elements<In, Out>();
    return calls::all_to_all_v<element_of<In>>{read_span(in), send_counts, write_span(out), receive_counts, stores};
  }
  template <class Data>
  auto make_broadcast(Data&& data, int root) {
    return calls::broadcast<element_of<Data>>{write_span(data), root};
  }
  template <class Data>
  auto make_send(Data&& data, int destination, int tag) {
    return calls::send<element_of<Data>>{read_span(data), destination, tag};
  }
  template <class Data>
  auto make_recv(Data&& data, int source, int tag) {
    return calls::recv<element_of<Data>>{write_span(data), source, tag};
  }

  template <class T>
  std::span<T> own_block(std::span<T> whole) {
    const std::size_t block = whole.size() / static_cast<std::size_t>(self().size());
    return whole.subspan(static_cast<std::size_t>(self().rank()) * block, block);
  }

  traffic_count traffic_{};
};

}  // namespace shardwise
