// What only the threads backend promises: a failing rank never leaves the others hanging, run()
// reports the first error with its rank, disagreements between ranks are caught rather than read out
// of bounds, and ranks that all wait or have returned stop with a deadlock_error. (Under MPI a failed
// rank ends the job through MPI_Abort instead, and a deadlock hangs: no process can tell one.)
#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "shardwise/comm/threads.hpp"
#include "shardwise/comm/threads/shared_memory.hpp"
#include "shardwise/comm/threads/stall_watch.hpp"
#include "shardwise/core/error.hpp"
#include "shardwise/core/huge_pages.hpp"
#include "shardwise/core/rank_local.hpp"

namespace {

using namespace shardwise;

std::string message_of(const std::exception& e) { return e.what(); }

// Every promise below holds whether the ranks run as threads or as fibers.
constexpr threads::ranks_as ways[] = {threads::ranks_as::threads, threads::ranks_as::fibers};
std::string name_of(threads::ranks_as how) { return how == threads::ranks_as::threads ? "threads" : "fibers"; }

TEST(threads_failures, a_rank_that_throws_makes_the_others_collectives_throw) {
  for (const auto how : ways)
    for (const int ranks : {2, 3, 8}) {
      SCOPED_TRACE(name_of(how));
      std::atomic<int> peer_errors{0};
      try {
        threads::run(
            ranks,
            [&](threads::communicator& comm) {
              std::vector<float> data(1000, 1.0F);
              comm.all_reduce(data, op::sum);  // everyone passes the first one
              if (comm.rank() == 1) throw std::runtime_error("rank one gives up");
              try {
                comm.all_reduce(data, op::sum);  // the others block here until rank 1's failure reaches them
              } catch (const peer_error& e) {
                ++peer_errors;
                EXPECT_NE(message_of(e).find("stopped because rank 1 failed: rank one gives up"), std::string::npos)
                    << e.what();
                throw;
              }
              ADD_FAILURE() << "rank " << comm.rank() << " completed an all_reduce without rank 1";
            },
            how);
        ADD_FAILURE() << "run returned normally";
      } catch (const rank_failure& e) {
        EXPECT_EQ(e.rank(), 1);
        EXPECT_NE(message_of(e).find("[rank 1] threads::run"), std::string::npos) << e.what();
        EXPECT_NE(message_of(e).find("rank one gives up"), std::string::npos) << e.what();
        try {
          std::rethrow_if_nested(e);
          ADD_FAILURE() << "the original exception is not nested";
        } catch (const std::runtime_error& original) {
          EXPECT_EQ(message_of(original), "rank one gives up");
        }
      }
      EXPECT_EQ(peer_errors.load(), ranks - 1);
    }
}

TEST(threads_failures, pending_requests_and_receives_are_released_too) {
  for (const auto how : ways) {
    SCOPED_TRACE(name_of(how));
    EXPECT_THROW(threads::run(
                     4,
                     [](threads::communicator& comm) {
                       std::vector<double> data(64, 1.0), received(64);
                       if (comm.rank() == 3) throw std::logic_error("late failure");
                       auto started = comm.iall_reduce(data, op::sum);
                       auto receive = comm.irecv(received, 3);  // rank 3 never sends
                       started.wait();
                     },
                     how),
                 rank_failure);
  }
}

TEST(threads_failures, a_shardwise_error_is_rethrown_as_it_is) {
  for (const auto how : ways) {
    SCOPED_TRACE(name_of(how));
    try {
      threads::run(
          3,
          [](threads::communicator& comm) {
            std::vector<int> three(3), four(4);
            if (comm.rank() == 2) comm.all_reduce(three, four);  // only rank 2 errs
            comm.barrier();
          },
          how);
      ADD_FAILURE() << "run returned normally";
    } catch (const argument_error& e) {
      EXPECT_EQ(e.rank(), 2);
      EXPECT_EQ(e.operation(), "all_reduce");
    }
  }
}

// An error says the calls it happened inside, outermost first; its reason leaves out the rank, and its
// operation and detail the calls too, for a summary of many runs that fail alike (08_plan_gpt's).
TEST(errors, the_message_names_the_calls_and_the_detail_leaves_them_out) {
  try {
    try {
      try {
        throw argument_error(3, "all_to_all_v", "sizes differ");
      } catch (...) {
        rethrow_within_call(3, "redistribute(row_1d<> → col_1d<>, 4x4)");
      }
    } catch (...) {
      rethrow_within_call(3, "model::gpt::forward(8 tokens, 8 targets)");
    }
    ADD_FAILURE() << "nothing was thrown";
  } catch (const argument_error& e) {
    EXPECT_STREQ(e.what(),
                 "[rank 3] model::gpt::forward(8 tokens, 8 targets): redistribute(row_1d<> → col_1d<>, 4x4): "
                 "all_to_all_v: sizes differ");
    EXPECT_EQ(e.reason(), std::string_view(e.what()).substr(std::string_view("[rank 3] ").size()));
    EXPECT_EQ(e.operation(), "all_to_all_v");
    EXPECT_EQ(e.detail(), "sizes differ");
  }
}

// An error raised without a rank, by a part that has no communicator, names the rank whose body it left,
// as an MPI rank's does when it takes the job down.
TEST(threads_failures, an_error_raised_without_a_rank_names_the_rank_it_happened_on) {
  for (const auto how : ways) {
    SCOPED_TRACE(name_of(how));
    try {
      threads::run(
          3,
          [](threads::communicator& comm) {
            if (comm.rank() == 1) throw argument_error(-1, "a_part", "went wrong");
            comm.barrier();
          },
          how);
      ADD_FAILURE() << "run returned normally";
    } catch (const argument_error& e) {
      EXPECT_EQ(std::string(e.what()), "[rank 1] a_part: went wrong");
    }
  }
}

// Ranks that disagree (different sizes, roots or operations) all throw, naming both sides. (Every
// kind of disagreement, on every backend: tests/comm/agreement_test.cpp.)
TEST(threads_failures, ranks_that_disagree_all_throw) {
  for (const auto how : ways) {
    SCOPED_TRACE(name_of(how));
    std::atomic<int> errors{0};
    threads::run(
        3,
        [&](threads::communicator& comm) {
          std::vector<float> data(comm.rank() == 1 ? 5 : 4);
          try {
            comm.all_reduce(data, op::sum);
            ADD_FAILURE() << "mismatched all_reduce completed on rank " << comm.rank();
          } catch (const argument_error& e) {
            ++errors;
            EXPECT_NE(message_of(e).find("all_reduce<float>(5 elements, sum)"), std::string::npos) << e.what();
            EXPECT_NE(message_of(e).find("all_reduce<float>(4 elements, sum)"), std::string::npos) << e.what();
          }
          std::vector<int> counts(1);
          try {
            if (comm.rank() == 0) comm.all_gather(std::vector<int>{1}, std::vector<int>(3));
            else
              comm.all_reduce(counts, op::max);
            ADD_FAILURE() << "different collectives matched on rank " << comm.rank();
          } catch (const argument_error& e) {
            ++errors;
            EXPECT_NE(message_of(e).find("rank 0 called all_gather<int32>(1 element)"), std::string::npos) << e.what();
          }
          std::vector<int> sends(3, 1), receives(3, 1);
          if (comm.rank() == 0) receives[2] = 2;
          std::vector<int> in(3), out(comm.rank() == 0 ? 4 : 3);
          EXPECT_THROW(comm.all_to_all_v(in, sends, out, receives), argument_error);
          comm.barrier();  // still in step afterwards
        },
        how);
    EXPECT_EQ(errors.load(), 6);
  }
}

// The error run() reports for a program that can never end, and the deadlock_error each waiting rank
// throws (all quote the same description).
void expect_deadlock(int ranks, threads::ranks_as how, const std::function<void(threads::communicator&)>& body,
                     const std::string& reported) {
  std::atomic<int> stopped{0};
  try {
    threads::run(
        ranks,
        [&](threads::communicator& comm) {
          try {
            body(comm);
          } catch (const deadlock_error&) {
            ++stopped;
            throw;
          }
        },
        how);
    ADD_FAILURE() << "run returned normally";
  } catch (const deadlock_error& e) {
    EXPECT_EQ(message_of(e), reported);
  }
  EXPECT_GE(stopped.load(), 1);
}

TEST(threads_deadlocks, a_call_the_other_ranks_never_make_stops_naming_it_and_the_ranks_that_returned) {
  for (const auto how : ways) {
    SCOPED_TRACE(name_of(how));
    expect_deadlock(
        4, how,
        [](threads::communicator& comm) {
          std::vector<double> data(4, 1.0);
          comm.all_reduce(data, op::sum);
          if (comm.rank() == 0) comm.all_reduce(data, op::sum);
        },
        "[rank 0] all_reduce: deadlock: rank 0 waits in all_reduce, and ranks 1..3 have returned from their "
        "bodies; no rank can go on");
  }
}

TEST(threads_deadlocks, ranks_that_wait_for_each_other_stop_each_naming_its_call) {
  for (const auto how : ways) {
    SCOPED_TRACE(name_of(how));
    expect_deadlock(
        2, how,
        [](threads::communicator& comm) {
          std::vector<float> data(8);
          comm.recv(data, 1 - comm.rank(), 0);  // each waits for the other's send
        },
        "[rank 0] recv: deadlock: rank 0 waits in recv from rank 1 with tag 0, rank 1 waits in recv from rank 0 "
        "with tag 0; no rank can go on");
    expect_deadlock(
        5, how,
        [](threads::communicator& comm) {
          std::vector<float> data(10);
          if (comm.rank() == 1 || comm.rank() == 3) comm.recv(data, 4, 0);  // rank 4 never sends
          if (comm.rank() == 2) comm.all_gather(std::span<const float>(data).first(2), data);
        },
        "[rank 1] recv: deadlock: ranks 1 and 3 wait in recv from rank 4 with tag 0, rank 2 waits in all_gather, "
        "and ranks 0 and 4 have returned from their bodies; no rank can go on");
    expect_deadlock(
        2, how,
        [](threads::communicator& comm) {
          std::vector<float> data(8);
          if (comm.rank() == 0) comm.send(data, 1, 5);
          else
            comm.recv(data, 0, 6);  // a tag no send has
        },
        "[rank 1] recv: deadlock: rank 1 waits in recv from rank 0 with tag 6, and rank 0 has returned from its "
        "body; no rank can go on");
  }
}

// A request dropped without wait() waits in its destructor, which cannot throw: what wait() would have
// thrown, a deadlock or a disagreement, is what run() reports, not a run that ends as if it succeeded.
TEST(threads_deadlocks, a_request_dropped_unwaited_reports_what_its_wait_would_have_thrown) {
  const auto reported = [](const std::function<void(threads::communicator&)>& body, threads::ranks_as how) {
    try {
      threads::run(2, body, how);
    } catch (const error& e) {
      return message_of(e);
    }
    return std::string("run returned normally");
  };
  for (const auto how : ways) {
    SCOPED_TRACE(name_of(how));
    EXPECT_EQ(reported(
                  [](threads::communicator& comm) {
                    std::vector<float> data(8);
                    if (comm.rank() == 0) {
                      auto never = comm.irecv(data, 1, 0);  // dropped: its destructor waits
                    }
                  },
                  how),
              "[rank 0] recv: deadlock: rank 0 waits in recv from rank 1 with tag 0, and rank 1 has returned from "
              "its body; no rank can go on");
    EXPECT_EQ(reported(
                  [](threads::communicator& comm) {
                    std::vector<float> data(4, 1.0F);
                    if (comm.rank() == 0) {
                      auto dropped = comm.iall_reduce(data);
                    } else {
                      comm.all_reduce(data);
                    }
                  },
                  how),
              "[rank 0] all_reduce: rank 0 called iall_reduce<float>(4 elements, sum) while rank 1 called "
              "all_reduce<float>(4 elements, sum)");
  }
}

// Ranks asleep while another computes, ranks that return while others go on among themselves, and
// waits that end just as the last running rank goes to sleep: none of them is a deadlock.
TEST(threads_deadlocks, ranks_that_return_early_or_wait_long_are_no_deadlock) {
  for (const auto how : ways) {
    SCOPED_TRACE(name_of(how));
    threads::run(
        4,
        [](threads::communicator& comm) {
          if (comm.rank() >= 2) return;
          std::vector<double> value(1);
          for (int round = 0; round < 200; ++round) {
            if (comm.rank() == 0) {
              if (round % 50 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
              value[0] = round;
              comm.send(value, 1, round);
              comm.recv(value, 1, round);
              EXPECT_EQ(value[0], round + 1.0);
            } else {
              comm.recv(value, 0, round);
              value[0] += 1;
              comm.send(value, 0, round);
            }
          }
        },
        how);
    threads::run(
        8,
        [](threads::communicator& comm) {
          std::vector<double> data(64, 1.0);
          for (int round = 0; round < 300; ++round) comm.all_reduce(data, op::max);
          auto half = comm.split(comm.rank() % 2, comm.rank());
          if (comm.rank() % 2 == 1) return;
          for (int round = 0; round < 300; ++round) half.all_reduce(data, op::max);
          EXPECT_EQ(data[0], 1.0);
        },
        how);
  }
}

TEST(threads_deadlocks, rank_lists_read_as_words_with_runs_shortened) {
  using threads::detail::ranks_in_words;
  EXPECT_EQ(ranks_in_words({3}), "rank 3");
  EXPECT_EQ(ranks_in_words({1, 2}), "ranks 1 and 2");
  EXPECT_EQ(ranks_in_words({1, 2, 3}), "ranks 1..3");
  EXPECT_EQ(ranks_in_words({0, 2, 4, 5, 6, 7}), "ranks 0, 2 and 4..7");
  EXPECT_EQ(ranks_in_words({0, 1, 2, 5, 6, 9}), "ranks 0..2, 5, 6 and 9");
}

TEST(threads_run, rejects_non_positive_rank_counts) {
  EXPECT_THROW(threads::run(0, [](threads::communicator&) {}), argument_error);
}

// A rank whose thread (or fiber's stack) cannot be had, here for want of address space, fails the run
// naming its rank, where the ranks already started would have waited for it for ever. In a child
// process, whose address space is held to what it uses and 256 MiB more: room for a few dozen
// threads' stacks and a few hundred fibers', not 4096. Exits 0 when run() throws argument_error.
// Unused under the sanitizers, which skip the test below.
[[noreturn, maybe_unused]] void run_4096_ranks_without_room(threads::ranks_as how) {
  mallopt(M_ARENA_MAX, 1);  // the threads' first allocations do not reserve an arena each
  long pages = 0;
  if (std::FILE* statm = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(statm, "%ld", &pages) != 1) pages = 0;
    std::fclose(statm);
  }
  const auto bytes = static_cast<rlim_t>(pages) * static_cast<rlim_t>(sysconf(_SC_PAGESIZE)) + (rlim_t{256} << 20);
  const rlimit limit{bytes, bytes};
  if (pages == 0 || setrlimit(RLIMIT_AS, &limit) != 0) std::exit(2);
  try {
    threads::run(4096, [](threads::communicator& comm) { comm.barrier(); }, how);
  } catch (const argument_error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    std::exit(0);
  }
  std::exit(1);
}

TEST(threads_run, a_rank_that_cannot_start_fails_the_run_instead_of_leaving_the_others_waiting) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizers' shadow memory does not fit under the limit";
#else
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  for (const auto how : ways)
    EXPECT_EXIT(run_4096_ranks_without_room(how), testing::ExitedWithCode(0),
                "threads::run: cannot (start the thread|map the [0-9]+-byte stack) of rank [0-9]+")
        << name_of(how);
#endif
}

// Many small collectives with more ranks than cores: blocking waits keep this quick; a spinning
// implementation would take minutes (the CTest timeout bounds it, no time is asserted here).
TEST(threads_run, many_small_collectives_on_oversubscribed_ranks) {
  for (const auto how : ways) {
    SCOPED_TRACE(name_of(how));
    threads::run(
        8,
        [](threads::communicator& comm) {
          std::vector<std::int64_t> value(1);
          for (int step = 0; step < 3000; ++step) {
            value[0] = comm.rank() + step;
            comm.all_reduce(value, op::sum);
            ASSERT_EQ(value[0], 28 + 8 * static_cast<std::int64_t>(step));
          }
        },
        how);
  }
}

// Ranks as fibers share a thread per core, several each, switching at every wait; what is a rank's own
// (core/rank_local.hpp) stays its own, and point-to-point messages between ranks of one thread arrive.
TEST(threads_run, fibers_keep_each_ranks_state_apart) {
  struct tag {
    int value = -1;
  };
  constexpr int ranks = 64;
  std::atomic<int> checked{0};
  threads::run(
      ranks,
      [&](threads::communicator& comm) {
        rank_local<tag>().value = comm.rank();
        for (int round = 0; round < 4; ++round) {
          comm.barrier();  // the thread's other ranks run and set theirs
          std::vector<int> mine{comm.rank()}, from_left(1);
          const int right = (comm.rank() + 1) % ranks, left = (comm.rank() + ranks - 1) % ranks;
          auto receiving = comm.irecv(std::span<int>(from_left), left);
          comm.send(std::span<const int>(mine), right);
          receiving.wait();
          EXPECT_EQ(from_left[0], left);
          EXPECT_EQ(rank_local<tag>().value, comm.rank());
        }
        ++checked;
      },
      threads::ranks_as::fibers);
  EXPECT_EQ(checked.load(), ranks);
}

// A rank that polls a started collective (MPI_Test's loop) gets there under fibers too: each test()
// that finds it unfinished lets the other ranks of its thread run once.
TEST(threads_run, a_rank_polling_a_request_lets_the_ranks_it_waits_for_run) {
  for (const auto how : ways) {
    SCOPED_TRACE(name_of(how));
    threads::run(
        8,
        [](threads::communicator& comm) {
          std::vector<double> data(4, 1.0);
          auto started = comm.iall_reduce(data, op::sum);
          while (!started.test()) {
          }
          EXPECT_EQ(data[0], 8.0);
        },
        how);
  }
}

// A rank's state is current while a scope holds it, and gives its objects back newest first (a later
// one may hold an earlier one's: a buffer accounted to the rank's storage).
TEST(rank_local, a_state_is_current_in_its_scope_and_destroys_newest_first) {
  static std::vector<int> destroyed;
  struct first {
    int value = 1;
    ~first() { destroyed.push_back(1); }
  };
  struct second {
    int value = 2;
    ~second() { destroyed.push_back(2); }
  };
  destroyed.clear();
  rank_local<first>().value = 10;  // the thread's own state
  {
    rank_state state;
    {
      const rank_state::scope as_rank(state);
      EXPECT_EQ(rank_local<first>().value, 1);  // a fresh one, not the thread's
      EXPECT_EQ(rank_local<second>().value, 2);
      rank_local<first>().value = 20;
    }
    EXPECT_EQ(rank_local<first>().value, 10);
    EXPECT_TRUE(destroyed.empty());
  }
  EXPECT_EQ(destroyed, (std::vector<int>{2, 1}));
}

TEST(bf16, rounds_to_nearest_even_and_keeps_nan) {
  EXPECT_EQ(static_cast<float>(bf16(1.0F)), 1.0F);
  EXPECT_EQ(static_cast<float>(bf16(256.0F)), 256.0F);
  EXPECT_EQ(static_cast<float>(bf16(257.0F)), 256.0F);  // halfway, rounds to even
  EXPECT_EQ(static_cast<float>(bf16(259.0F)), 260.0F);  // halfway, rounds to even (up)
  EXPECT_EQ(static_cast<float>(bf16(258.5F)), 258.0F);  // below halfway
  EXPECT_EQ(static_cast<float>(bf16(259.5F)), 260.0F);  // above halfway
  EXPECT_TRUE(std::isnan(static_cast<float>(bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(static_cast<float>(bf16(-3.0F)), -3.0F);
}

// Large blocks start on a 2 MiB boundary, where a huge page can back them (whether the kernel gives one
// is its choice, not asserted); small ones on a cache line. Shared memory between thread ranks is such a
// block.
TEST(huge_pages, large_blocks_start_on_a_huge_page_and_shared_memory_is_one) {
  const auto offset_in = [](const void* address, std::size_t alignment) {
    return reinterpret_cast<std::uintptr_t>(address) % alignment;
  };
  std::vector<float, huge_page_allocator<float>> large(huge_page_bytes / sizeof(float) + 3, 1.0F), small(100, 2.0F);
  EXPECT_EQ(offset_in(large.data(), huge_page_bytes), 0u);
  EXPECT_EQ(offset_in(small.data(), 64), 0u);
  large.back() = 3.0F;
  EXPECT_EQ(large.front() + large.back() + small.back(), 6.0F);
  threads::run(3, [&](threads::communicator& comm) {
    const auto memory = threads::share_memory(comm, 3 * huge_page_bytes + static_cast<std::size_t>(comm.rank()));
    ASSERT_TRUE(memory.has_value());
    for (int peer = 0; peer < comm.size(); ++peer) {
      EXPECT_EQ(offset_in(memory->block(peer).data(), huge_page_bytes), 0u) << "rank " << peer << "'s block";
      EXPECT_EQ(memory->block(peer).size(), 3 * huge_page_bytes + static_cast<std::size_t>(peer));
    }
  });
}

// Each rank's block of shared memory is freed by the last rank to let go of it, so a rank that fails
// neither leaves its block allocated (a leak, which the sanitizer builds' LeakSanitizer reports) nor
// frees it under a peer that may still store into it (a use after free, which AddressSanitizer reports).
TEST(shared_memory, a_failed_rank_leaves_its_block_to_the_last_peer_that_holds_it) {
  for (const auto how : ways) {
    SCOPED_TRACE(name_of(how));
    std::atomic<int> stored{0};
    EXPECT_THROW(threads::run(
                     3,
                     [&](threads::communicator& comm) {
                       const auto memory = threads::share_memory(comm, 4096);
                       ASSERT_TRUE(memory.has_value());
                       if (comm.rank() == 0) throw std::runtime_error("rank 0 fails holding shared memory");
                       try {
                         comm.barrier();  // throws once rank 0 has unwound, its shared memory gone
                       } catch (const peer_error&) {
                         const auto block = memory->block(0);
                         block[static_cast<std::size_t>(comm.rank())] = std::byte{1};
                         if (block[static_cast<std::size_t>(comm.rank())] == std::byte{1}) ++stored;
                         throw;
                       }
                     },
                     how),
                 rank_failure);
    EXPECT_EQ(stored.load(), 2) << "each peer stored into the failed rank's block after it had unwound";
  }
}

}  // namespace
