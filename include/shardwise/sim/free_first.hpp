#pragma once
// Workgroups by when each is next free, the one free first on top (ties: the lower workgroup): whom a
// persistent kernel's ticket counter hands its next task. A binary heap whose top moves down in place
// when its workgroup takes a task: one sift a task, where a priority queue pops and pushes (a kernel
// of the fused paper's largest shapes hands out millions of tasks).
#include <cstddef>
#include <span>
#include <vector>

namespace shardwise::sim {

class free_first {
 public:
  free_first() = default;
  // Workgroup w free from clocks[w] on.
  explicit free_first(std::span<const double> clocks) {
    heap_.reserve(clocks.size());
    for (std::size_t w = 0; w < clocks.size(); ++w) heap_.push_back({clocks[w], static_cast<int>(w)});
    for (std::size_t i = heap_.size() / 2; i-- > 0;) sift_down(i);
  }

  [[nodiscard]] int workgroup() const { return heap_.front().workgroup; }
  [[nodiscard]] double time() const { return heap_.front().time; }
  // The workgroup on top is busy until `time`.
  void busy_until(double time) {
    heap_.front().time = time;
    sift_down(0);
  }

 private:
  struct entry {
    double time;
    int workgroup;
  };
  [[nodiscard]] static bool earlier(const entry& a, const entry& b) noexcept {
    return a.time < b.time || (a.time == b.time && a.workgroup < b.workgroup);
  }
  void sift_down(std::size_t i) {
    const std::size_t n = heap_.size();
    const entry moving = heap_[i];
    for (std::size_t child = 2 * i + 1; child < n; child = 2 * i + 1) {
      if (child + 1 < n && earlier(heap_[child + 1], heap_[child])) ++child;
      if (!earlier(heap_[child], moving)) break;
      heap_[i] = heap_[child];
      i = child;
    }
    heap_[i] = moving;
  }

  std::vector<entry> heap_;
};

}  // namespace shardwise::sim
