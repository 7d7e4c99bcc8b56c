#pragma once
// Ranks as fibers: many ranks on one thread, each on a stack of its own, switched in user space (on
// x86-64 by saving the registers the ABI says a call preserves and changing stacks, a few nanoseconds;
// elsewhere, and with shadow stacks, by ucontext's swapcontext, which also saves the signal mask: a
// system call). With far more ranks than cores (thousands of simulated GPUs on a laptop) a rank that
// waits for its peers then hands its thread to the next rank of that thread instead of sleeping in the
// kernel: a meeting of P ranks costs P switches of stacks, not P wake-ups of kernel threads, which is
// what a shapes-only simulation of thousands of ranks otherwise spends about half of its time on.
//
//   run_as_fibers(ranks, threads, rank_main)   rank_main(r) for every rank, rank r on thread r % threads
//                                              (thread 0 is the caller's); returns when all have returned
//
// Each thread resumes its ranks in turn. A rank waiting for a counter (blocking_wait.hpp) is resumed
// only once the counter reached its target or was marked aborted; a thread whose ranks all wait lets
// the others run (sched_yield). Each rank has its own rank_state (core/rank_local.hpp), current while
// it runs. rank_main must not throw, and a rank must never suspend while it holds a lock another rank
// of its thread may take: only the waits below suspend, and the backend's waits hold none.
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "shardwise/comm/detail/wait_target.hpp"
#include "shardwise/core/error.hpp"
#include "shardwise/core/rank_local.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define SHARDWISE_FIBERS_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SHARDWISE_FIBERS_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define SHARDWISE_FIBERS_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SHARDWISE_FIBERS_TSAN 1
#endif
#endif

// The sanitizers follow a switch of stacks only when told (their fiber interfaces).
#ifdef SHARDWISE_FIBERS_ASAN
extern "C" void __sanitizer_start_switch_fiber(void** fake_stack_save, const void* bottom, std::size_t size);
extern "C" void __sanitizer_finish_switch_fiber(void* fake_stack_save, const void** bottom_old, std::size_t* size_old);
extern "C" void __asan_unpoison_memory_region(const volatile void* address, std::size_t size);
#endif
#ifdef SHARDWISE_FIBERS_TSAN
extern "C" void* __tsan_get_current_fiber();
extern "C" void* __tsan_create_fiber(unsigned flags);
extern "C" void __tsan_destroy_fiber(void* fiber);
extern "C" void __tsan_switch_to_fiber(void* fiber, unsigned flags);
#endif

namespace shardwise::detail {

#if defined(__x86_64__) && !(defined(__CET__) && (__CET__ & 2))
// Saves the registers the System V x86-64 ABI has a call preserve (rbp, rbx, r12–r15, and the SSE and
// x87 control words) on the current stack, stores the stack pointer in *from, takes `to` as the stack
// and restores what was saved there. A new stack is laid out as if it had been saved with its entry
// as the return address (machine_context::prepare).
[[gnu::naked, gnu::noinline]] inline void switch_stacks(void** /*from*/, void* /*to*/) noexcept {
  asm(R"(
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $16, %rsp
    stmxcsr 8(%rsp)
    fnstcw 12(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr 8(%rsp)
    fldcw 12(%rsp)
    addq $16, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
  )");
}

struct machine_context {
  void* stack_pointer = nullptr;

  void prepare(void* bottom, std::size_t bytes, void (*entry)()) {
    auto* top = reinterpret_cast<std::uint64_t*>(static_cast<std::byte*>(bottom) + bytes);
    std::uint32_t sse_control = 0;
    std::uint16_t x87_control = 0;
    asm volatile("stmxcsr %0" : "=m"(sse_control));
    asm volatile("fnstcw %0" : "=m"(x87_control));
    top[-1] = 0;  // entry's return address: it never returns
    top[-2] = reinterpret_cast<std::uint64_t>(entry);
    for (int saved = 3; saved <= 8; ++saved) top[-saved] = 0;  // rbp, rbx, r12–r15
    top[-9] = sse_control | (std::uint64_t{x87_control} << 32);
    top[-10] = 0;
    stack_pointer = top - 10;  // entry starts with the stack 16-byte aligned plus a return address
  }
  friend void switch_context(machine_context& from, const machine_context& to) noexcept {
    switch_stacks(&from.stack_pointer, to.stack_pointer);
  }
};
#else
struct machine_context {
  ucontext_t context{};

  void prepare(void* bottom, std::size_t bytes, void (*entry)()) {
    ::getcontext(&context);
    context.uc_stack.ss_sp = bottom;
    context.uc_stack.ss_size = bytes;
    context.uc_link = nullptr;  // entry never returns
    ::makecontext(&context, entry, 0);
  }
  friend void switch_context(machine_context& from, const machine_context& to) noexcept {
    ::swapcontext(&from.context, &to.context);
  }
};
#endif

class fiber_thread;

// The fibers the calling thread runs, or null: how a wait learns that it may suspend.
inline fiber_thread*& fibers_of_this_thread() noexcept {
  thread_local fiber_thread* fibers = nullptr;
  return fibers;
}

class fiber_thread {
 public:
  // Each rank's stack: address space reserved, backed by memory only where the rank touches it.
  static constexpr std::size_t stack_bytes = std::size_t{1} << 20;

  fiber_thread(const std::vector<int>& ranks, std::function<void(int)>& rank_main) : rank_main_(&rank_main) {
    fibers_.reserve(ranks.size());
    for (const int rank : ranks) fibers_.push_back(std::make_unique<fiber>(rank));
  }
  fiber_thread(const fiber_thread&) = delete;
  fiber_thread& operator=(const fiber_thread&) = delete;

  // Runs every rank to its end, on the calling thread.
  void run() {
    fibers_of_this_thread() = this;
#ifdef SHARDWISE_FIBERS_TSAN
    scheduler_tsan_ = __tsan_get_current_fiber();
#endif
    std::size_t running = fibers_.size();
    while (running > 0) {
      bool resumed = false;
      for (auto& f : fibers_) {
        if (f->finished || !f->may_resume()) continue;
        resume(*f);
        resumed = true;
        if (f->finished) {
          f->release_stack();
          --running;
        }
      }
      if (!resumed) std::this_thread::yield();  // every rank here waits for a rank of another thread
    }
    fibers_of_this_thread() = nullptr;
  }

  // From a rank: suspends it until `counter` reaches `target` or is marked aborted (wait_target.hpp).
  void wait_for(const std::atomic<std::uint32_t>& counter, std::uint32_t target) {
    current_->waiting_on = &counter;
    current_->target = target;
    suspend();
  }
  // From a rank: lets the thread's other ranks run once.
  void yield() { suspend(); }

 private:
  struct fiber {
    explicit fiber(int r) : rank(r) {
      const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
      mapped = stack_bytes + page;
      void* start = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
      if (start == MAP_FAILED)
        throw argument_error(rank, "threads::run",
                             "cannot map the " + std::to_string(mapped) + "-byte stack of rank " +
                                 std::to_string(rank) + " as a fiber (" + std::strerror(errno) + "): run fewer ranks");
      region = start;
      ::mprotect(region, page, PROT_NONE);  // a guard page below the stack: an overflow faults
      bottom = static_cast<std::byte*>(region) + page;
      context.prepare(bottom, stack_bytes, &fiber_thread::entry);
#ifdef SHARDWISE_FIBERS_TSAN
      tsan = __tsan_create_fiber(0);
#endif
    }
    fiber(const fiber&) = delete;
    fiber& operator=(const fiber&) = delete;
    ~fiber() { release_stack(); }

    [[nodiscard]] bool may_resume() {
      if (waiting_on == nullptr) return true;
      if (!settled(waiting_on->load(std::memory_order_acquire), target)) return false;
      waiting_on = nullptr;
      return true;
    }
    void release_stack() noexcept {
#ifdef SHARDWISE_FIBERS_ASAN
      // A rank's last frames never return, so their red zones stay marked: a later stack mapped here
      // would inherit them.
      if (region != nullptr) __asan_unpoison_memory_region(region, mapped);
#endif
      if (region != nullptr) ::munmap(region, mapped);
      region = nullptr;
#ifdef SHARDWISE_FIBERS_TSAN
      if (tsan != nullptr) __tsan_destroy_fiber(tsan);
      tsan = nullptr;
#endif
    }

    int rank;
    machine_context context;
    void* region = nullptr;
    std::size_t mapped = 0;
    void* bottom = nullptr;
    rank_state state;
    bool finished = false;
    const std::atomic<std::uint32_t>* waiting_on = nullptr;
    std::uint32_t target = 0;
    void* fake_stack = nullptr;  // AddressSanitizer's, while suspended
    void* tsan = nullptr;        // ThreadSanitizer's fiber
  };

  // The first code a rank runs on its stack. It never returns: it switches to the scheduler for good,
  // after telling the sanitizers, which would otherwise see its return pop the scheduler's frames.
  [[noreturn]] static void entry() {
    fiber_thread& self = *fibers_of_this_thread();
    fiber& f = *self.current_;
#ifdef SHARDWISE_FIBERS_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &self.scheduler_bottom_, &self.scheduler_size_);
#endif
    (*self.rank_main_)(f.rank);
    f.finished = true;
#ifdef SHARDWISE_FIBERS_ASAN
    __sanitizer_start_switch_fiber(nullptr, self.scheduler_bottom_, self.scheduler_size_);  // this stack ends
#endif
#ifdef SHARDWISE_FIBERS_TSAN
    __tsan_switch_to_fiber(self.scheduler_tsan_, 0);
#endif
    switch_context(f.context, self.scheduler_);
    std::abort();  // never resumed
  }

  void resume(fiber& f) {
    current_ = &f;
    const rank_state::scope as_rank(f.state);
#ifdef SHARDWISE_FIBERS_ASAN
    void* scheduler_fake_stack = nullptr;
    __sanitizer_start_switch_fiber(&scheduler_fake_stack, f.bottom, stack_bytes);
#endif
#ifdef SHARDWISE_FIBERS_TSAN
    __tsan_switch_to_fiber(f.tsan, 0);
#endif
    switch_context(scheduler_, f.context);
#ifdef SHARDWISE_FIBERS_ASAN
    __sanitizer_finish_switch_fiber(scheduler_fake_stack, nullptr, nullptr);
#endif
    current_ = nullptr;
  }

  void suspend() {
    fiber& f = *current_;
#ifdef SHARDWISE_FIBERS_ASAN
    __sanitizer_start_switch_fiber(&f.fake_stack, scheduler_bottom_, scheduler_size_);
#endif
#ifdef SHARDWISE_FIBERS_TSAN
    __tsan_switch_to_fiber(scheduler_tsan_, 0);
#endif
    switch_context(f.context, scheduler_);
#ifdef SHARDWISE_FIBERS_ASAN
    __sanitizer_finish_switch_fiber(f.fake_stack, &scheduler_bottom_, &scheduler_size_);
#endif
  }

  std::function<void(int)>* rank_main_;
  std::vector<std::unique_ptr<fiber>> fibers_;
  fiber* current_ = nullptr;
  machine_context scheduler_;
#ifdef SHARDWISE_FIBERS_ASAN
  const void* scheduler_bottom_ = nullptr;
  std::size_t scheduler_size_ = 0;
#endif
#ifdef SHARDWISE_FIBERS_TSAN
  void* scheduler_tsan_ = nullptr;
#endif
};

// rank_main(r) for every r in [0, ranks), as fibers on `threads` threads: rank r on thread r % threads,
// thread 0 the calling one. rank_main must not throw.
inline void run_as_fibers(int ranks, int threads, std::function<void(int)> rank_main) {
  std::vector<std::unique_ptr<fiber_thread>> parts;
  for (int t = 0; t < threads; ++t) {
    std::vector<int> mine;
    for (int r = t; r < ranks; r += threads) mine.push_back(r);
    parts.push_back(std::make_unique<fiber_thread>(mine, rank_main));
  }
  std::vector<std::jthread> others;
  for (int t = 1; t < threads; ++t) others.emplace_back([&part = *parts[static_cast<std::size_t>(t)]] { part.run(); });
  parts.front()->run();
}

// Lets other ranks run: the thread's next fiber when the caller is one, else another thread.
inline void let_others_run() {
  if (fiber_thread* fibers = fibers_of_this_thread()) fibers->yield();
  else
    std::this_thread::yield();
}

}  // namespace shardwise::detail
