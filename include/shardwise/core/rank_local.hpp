#pragma once
// rank_local<T>(): the calling rank's own T, value-initialised on first use. State that belongs to a
// rank rather than to the code running it (its storage accounting, whether its forward passes keep what
// a backward needs, the products' buffers) lives here, not in thread_locals, because a backend may run
// several ranks on one thread: the threads backend's fibers (comm/detail/fibers.hpp) give each rank a
// rank_state and make it current while the rank runs (rank_state::scope). A thread that runs one rank,
// or none, has a state of its own, so for it rank_local is a thread_local.
//
//   struct keeping { bool value = true; };     // a type of the caller's own: two users never share a slot
//   rank_local<keeping>().value = false;
#include <atomic>
#include <cstddef>
#include <vector>

namespace shardwise {

namespace detail {

inline std::atomic<std::size_t> next_rank_local_slot{0};

template <class T>
std::size_t rank_local_slot() {
  static const std::size_t slot = next_rank_local_slot++;
  return slot;
}

}  // namespace detail

class rank_state {
 public:
  rank_state() = default;
  rank_state(const rank_state&) = delete;
  rank_state& operator=(const rank_state&) = delete;
  // Later objects may hold earlier ones' (a buffer accounted to a rank): destroyed newest first.
  ~rank_state() {
    for (auto slot = made_.rbegin(); slot != made_.rend(); ++slot) {
      held& h = slots_[*slot];
      h.destroy(h.object);
    }
  }

  template <class T>
  [[nodiscard]] T& get() {
    const std::size_t slot = detail::rank_local_slot<T>();
    if (slot >= slots_.size()) slots_.resize(slot + 1);
    held& h = slots_[slot];
    if (h.object == nullptr) {
      h = {new T(), [](void* object) { delete static_cast<T*>(object); }};
      made_.push_back(slot);
    }
    return *static_cast<T*>(h.object);
  }

  // The state of the rank the calling thread runs now.
  [[nodiscard]] static rank_state& current() noexcept { return *current_pointer(); }

  // Makes `state` the calling thread's current rank state until the scope closes.
  class scope {
   public:
    explicit scope(rank_state& state) noexcept : previous_(current_pointer()) { current_pointer() = &state; }
    scope(const scope&) = delete;
    scope& operator=(const scope&) = delete;
    ~scope() { current_pointer() = previous_; }

   private:
    rank_state* previous_;
  };

 private:
  struct held {
    void* object = nullptr;
    void (*destroy)(void*) = nullptr;
  };

  static rank_state*& current_pointer() noexcept {
    thread_local rank_state own;
    thread_local rank_state* current = &own;
    return current;
  }

  std::vector<held> slots_;
  std::vector<std::size_t> made_;
};

template <class T>
[[nodiscard]] T& rank_local() {
  return rank_state::current().template get<T>();
}

}  // namespace shardwise
