#pragma once
// How the slices of one fused operation reach their destinations, whatever the backend
// (fused/embedding_backend.hpp) says of each peer: every rank has a buffer that its peers fill, in a
// symmetric window over the ranks it shares memory with (fused/primitives.hpp), and flags there.
//
//   store     the sender writes straight into peer_buffer(peer), then signal(peer, flag)
//   put       the sender writes into a staging buffer of its own, then put(peer, offset, data) and
//             signal(peer, flag)
//   message   the receiver posts receive(source, into) before the call's sends; the sender writes
//             into a staging buffer, then send(peer, data)
// The receiver waits with wait(flag) for the flags of stored and put slices, and with
// wait_receive(i) or wait_receives() for messages; wait_sends() ends the call's sends.
//
// Flags hold the call's epoch, so a signal from an earlier call never satisfies a later one and nothing
// is reset between calls except what the caller resets itself. Each rank has two buffers, used by
// turns (calls of odd and even epoch): a peer stores call e's slices into the one that held call
// e − 2's only after the owner has entered call e − 1 (its flag 0, raised by begin_call), so what a
// rank received stays valid until it calls again; a peer that has received the owner's slices in call
// e − 1 knows that already and does not wait.
//
// A rank that stores no values (shapes-only runs, sim/sim_gpu.hpp) keeps only its flags in the window:
// its buffers and its peers' lie in the unstored range (core/element_memory.hpp), stores into them are
// skipped (the kernels do not run) and puts move nothing; flags and messages behave as ever. Either way
// the window's buffers and flags are counted as the rank's working memory.
#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardwise/core/element_memory.hpp"
#include "shardwise/core/error.hpp"
#include "shardwise/fused/embedding_backend.hpp"
#include "shardwise/fused/primitives.hpp"

namespace shardwise::fused {

template <class T, embedding_backend Backend>
class slice_exchange {
  using data_communicator_type = typename Backend::data_communicator_type;
  using request = typename data_communicator_type::request;
  static constexpr std::size_t buffers = 2;

 public:
  // Collective over the backend's ranks: this rank's buffer of `elements` (two of them, used by turns)
  // and `flags` flags, flag 0 among them. Messages carry `tag`; errors name `operation`.
  slice_exchange(Backend& backend, std::size_t elements, std::size_t flags, int tag, std::string_view operation)
      : backend_(&backend),
        tag_(tag),
        operation_(operation),
        elements_(elements),
        unstored_(element_memory::unstored_on_this_thread<T>(elements)),
        window_bytes_(static_cast<std::int64_t>(symmetric_window<T>::bytes_of(buffers * elements, flags)),
                      memory_use::working),
        group_(backend.data_communicator().split(backend.group_of(backend.data_communicator().rank()),
                                                 backend.data_communicator().rank())) {
    const int P = backend.data_communicator().size(), r = backend.data_communicator().rank();
    for (int p = 0, in_group = 0; p < P; ++p)
      group_rank_.push_back(backend.group_of(p) == backend.group_of(r) ? in_group++ : -1);
    entered_.assign(static_cast<std::size_t>(P), 0);
    auto window = symmetric_window<T>::create(group_, unstored_ ? 0 : buffers * elements, flags);
    if (!window)
      throw error(backend.world_rank(), operation_,
                  "the " + std::to_string(group_.size()) +
                      " ranks of this rank's group share memory, but mapping it failed; with "
                      "embedding_options::share_memory = false they send each other messages instead");
    window_.emplace(std::move(*window));
  }
  slice_exchange(const slice_exchange&) = delete;
  slice_exchange& operator=(const slice_exchange&) = delete;

  [[nodiscard]] delivery delivery_to(int peer) const { return backend_->delivery_to(peer); }
  // Calls begun so far (the epoch the current call's flags carry).
  [[nodiscard]] std::uint64_t epoch() const noexcept { return epoch_; }

  // Starts a call: numbers it and tells the group (flag 0) that this rank has entered it, so its buffer
  // of the call before the last may be overwritten; waits in it time out after `timeout`.
  void begin_call(std::chrono::duration<double> timeout) {
    ++epoch_;
    window_->flags().raise(0, epoch_);
    deadline_ =
        std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout);
    std::fill(entered_.begin(), entered_.end(), 0);
  }
  // This rank's buffer of the current call.
  [[nodiscard]] std::span<T> buffer() const {
    if (unstored_) return {unstored_, elements_};
    return window_->local().subspan(at(epoch_, elements_), elements_);
  }

  // `peer`'s buffer of the current call, to store into; the first time in a call, waits until the peer
  // has entered the call before, which frees it.
  [[nodiscard]] T* peer_buffer(int peer) {
    free_of(peer);
    if (unstored_) return unstored_;
    const auto whole = window_->peer_buffer(group_rank(peer));
    return whole.data() + at(epoch_, whole.size() / buffers);
  }
  void put(int peer, std::size_t offset, std::span<const T> data) {
    free_of(peer);
    if (unstored_) return;
    window_->put(group_rank(peer), at(epoch_, window_->peer_buffer(group_rank(peer)).size() / buffers) + offset, data);
  }
  // Raises `peer`'s flag to this call's epoch, after every store and put before it.
  void signal(int peer, std::size_t flag) {
    window_->fence();
    window_->signal(group_rank(peer), flag, epoch_);
  }
  // Blocks until this rank's `flag` holds this call's epoch; throws peer_error naming what() (asked only
  // then) when the call's time runs out.
  template <std::invocable Describe>
  void wait(std::size_t flag, Describe&& what) const {
    window_->flags().wait_or_throw(flag, epoch_, deadline_, backend_->world_rank(), operation_,
                                   std::forward<Describe>(what));
  }

  // Messages: receives in each sender's order (messages between two ranks with one tag match in order).
  std::size_t receive(int source, std::span<T> into) {
    receives_.push_back(backend_->data_communicator().irecv(into, source, tag_));
    return receives_.size() - 1;
  }
  void send(int destination, std::span<const T> data) {
    sends_.push_back(backend_->data_communicator().isend(data, destination, tag_));
  }
  void wait_receive(std::size_t i) { receives_[i].wait(); }
  void wait_receives() {
    for (auto& r : receives_) r.wait();
    receives_.clear();
  }
  void wait_sends() {
    for (auto& s : sends_) s.wait();
    sends_.clear();
  }

 private:
  // Where the buffer of call `epoch` begins in a block of two buffers of `elements` each.
  static std::size_t at(std::uint64_t epoch, std::size_t elements) noexcept { return (epoch % buffers) * elements; }
  [[nodiscard]] int group_rank(int peer) const { return group_rank_[static_cast<std::size_t>(peer)]; }

  void free_of(int peer) {
    auto& entered = entered_[static_cast<std::size_t>(peer)];
    if (entered) return;
    window_->peer_flags(group_rank(peer))
        .wait_or_throw(0, epoch_ - 1, deadline_, backend_->world_rank(), operation_, [&] {
          return "rank " + std::to_string(peer) + " to enter call " + std::to_string(epoch_ - 1) +
                 " and free its buffer";
        });
    entered = 1;
  }

  Backend* backend_;
  int tag_;
  std::string operation_;
  std::size_t elements_;
  T* unstored_;                   // where this rank's and its peers' buffers lie when it stores no values
  counted_bytes window_bytes_;    // the window's buffers and flags, as a full run maps them
  data_communicator_type group_;  // the ranks of this rank's group
  std::vector<int> group_rank_;   // each rank's rank in group_, or -1
  std::optional<symmetric_window<T>> window_;
  std::vector<char> entered_;  // per peer: known to have entered the call before this one
  std::chrono::steady_clock::time_point deadline_{};
  std::uint64_t epoch_ = 0;
  std::vector<request> receives_, sends_;
};

}  // namespace shardwise::fused
