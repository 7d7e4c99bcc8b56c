#pragma once
// Which logical workgroup tasks of each slice are done, and which task finished a slice last
// (Punniyamurthy et al.'s WG_Done bitmask): the task whose bit completes its slice's mask sends the
// slice, so no workgroup waits at a barrier for the others.
//
// A slice of n tasks has ceil(n / 64) words. With one word, the task whose atomic mark (a
// compare-and-swap loop) fills it is the last. With more, the task that fills a word also counts the slice's full
// words, and the one that counts the last word is the last: each word is filled by exactly one task and each count is
// seen by exactly one, so exactly one task finishes a slice however the tasks interleave. That task clears the slice's
// words and count for the next call (no other task of the slice runs until then).
//
// Where one thread runs all the tasks (a rank of the threads or sim_gpu backend runs its logical
// workgroups in turn), the marks are plain loads and stores: on x86 an atomic read-modify-write waits
// until every store before it has reached the cache, which after pooling a row into a peer's output
// stalled the fused embedding for 12% of its time.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

namespace shardwise {

enum class tasks_run { concurrently, on_one_thread };

class done_bitmask {
 public:
  // One slice per entry of `tasks_per_slice`.
  explicit done_bitmask(std::span<const std::int64_t> tasks_per_slice, tasks_run how = tasks_run::concurrently)
      : tasks_(tasks_per_slice.begin(), tasks_per_slice.end()), concurrent_(how == tasks_run::concurrently) {
    first_word_.push_back(0);
    for (const auto n : tasks_) first_word_.push_back(first_word_.back() + static_cast<std::size_t>((n + 63) / 64));
    words_ = std::make_unique<std::atomic<std::uint64_t>[]>(first_word_.back());
    full_words_ = std::make_unique<std::atomic<std::size_t>[]>(tasks_.size());
  }

  // Marks task `task` of slice `slice` done; true for exactly one task per slice and call: the last.
  bool complete(std::size_t slice, std::int64_t task) {
    const std::size_t first = first_word_[slice], words = first_word_[slice + 1] - first;
    const auto word = static_cast<std::size_t>(task / 64);
    const std::uint64_t bit = std::uint64_t{1} << (task % 64);
    if (add(words_[first + word], bit, [](std::uint64_t a, std::uint64_t b) { return a | b; }) !=
        full_mask(slice, word))
      return false;
    if (words > 1 && add(full_words_[slice], std::size_t{1}, std::plus<>{}) != words) return false;
    for (std::size_t w = first; w < first + words; ++w) words_[w].store(0, std::memory_order_relaxed);
    full_words_[slice].store(0, std::memory_order_relaxed);
    return true;
  }

 private:
  // Combines `value` into `into` (a bit into a word, a word into the count); returns the new value.
  template <class T, class Combine>
  T add(std::atomic<T>& into, T value, Combine combine) const noexcept {
    T old = into.load(std::memory_order_relaxed);
    if (!concurrent_) into.store(combine(old, value), std::memory_order_relaxed);
    else
      while (
          !into.compare_exchange_weak(old, combine(old, value), std::memory_order_acq_rel, std::memory_order_relaxed)) {
      }
    return combine(old, value);
  }

  // The bits of word `word` that slice `slice`'s tasks fill.
  [[nodiscard]] std::uint64_t full_mask(std::size_t slice, std::size_t word) const noexcept {
    const std::int64_t bits = tasks_[slice] - static_cast<std::int64_t>(word) * 64;
    return bits >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << bits) - 1;
  }

  std::vector<std::int64_t> tasks_;
  std::vector<std::size_t> first_word_;  // slice s owns words [first_word_[s], first_word_[s + 1])
  std::unique_ptr<std::atomic<std::uint64_t>[]> words_;
  std::unique_ptr<std::atomic<std::size_t>[]> full_words_;
  bool concurrent_;
};

}  // namespace shardwise
