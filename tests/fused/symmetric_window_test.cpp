// Symmetric windows on every backend whose ranks share memory: threads, and MPI ranks on one node (an
// MPI-3 shared-memory window, so these bodies run across processes): put, fence, signal and wait
// between every pair of ranks call after call, and a waiter asleep on its flag woken by a peer's raise.
#include "shardwise/comm/shared/symmetric_window.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "support/backends.hpp"
#include "support/messages.hpp"

namespace {

using namespace shardwise;
using shardwise::testing::message_of;
using namespace std::chrono_literals;

template <class Backend>
class symmetric_window : public ::testing::Test {};
TYPED_TEST_SUITE(symmetric_window, shardwise::testing::backends);

auto soon(std::chrono::steady_clock::duration d) { return std::chrono::steady_clock::now() + d; }

TYPED_TEST(symmetric_window, put_fence_signal_wait_between_every_pair_of_ranks) {
  TypeParam::run([](communicator auto& comm) {
    // ctest runs every MPI test on one machine, where the ranks share memory.
    const int P = comm.size(), r = comm.rank();
    ASSERT_EQ(shardwise::shared_memory_groups_of(comm), std::vector<int>(static_cast<std::size_t>(P), 0));
    // Sizes differ by rank: each block's flags sit after its own elements.
    const auto window =
        shardwise::symmetric_window<float>::create(comm, static_cast<std::size_t>(P + r), static_cast<std::size_t>(P));
    ASSERT_TRUE(window.has_value());
    EXPECT_EQ(window->local().size(), static_cast<std::size_t>(P + r));
    for (std::uint64_t epoch = 1; epoch <= 3; ++epoch) {
      for (int peer = 0; peer < P; ++peer) {
        const float value = static_cast<float>(100 * epoch + 10 * r + peer);
        window->put(peer, static_cast<std::size_t>(r), std::span<const float>(&value, 1));
        window->fence();
        window->signal(peer, static_cast<std::size_t>(r), epoch);
      }
      for (int source = 0; source < P; ++source) {
        ASSERT_TRUE(window->wait(static_cast<std::size_t>(source), epoch, soon(10s)));
        EXPECT_EQ(window->local()[static_cast<std::size_t>(source)], static_cast<float>(100 * epoch + 10 * source + r));
      }
      comm.barrier();  // nobody overwrites a slot before its owner has read it
    }
    EXPECT_THROW(window->put((r + 1) % P, static_cast<std::size_t>(P + (r + 1) % P), std::vector<float>(1)),
                 argument_error);
  });
}

TYPED_TEST(symmetric_window, a_waiter_asleep_on_its_flag_wakes_when_a_peer_raises_it) {
  TypeParam::run(
      [](communicator auto& comm) {
        const auto window = shardwise::symmetric_window<float>::create(comm, 1, 1);
        ASSERT_TRUE(window.has_value());
        const int P = comm.size(), r = comm.rank();
        comm.barrier();
        if (r == 0) {
          // The raise comes long after the waiter's spin, so it sleeps; a wake-up lost between threads or
          // processes would keep it asleep until the deadline, after which it would still see the flag.
          const auto deadline = soon(20s);
          EXPECT_TRUE(window->wait(0, 1, deadline));
          EXPECT_LT(std::chrono::steady_clock::now(), deadline) << "the raise did not wake the waiter";
        } else if (r == P - 1) {
          std::this_thread::sleep_for(100ms);
          window->signal(0, 0, 1);
        }
        comm.barrier();
      },
      {2, 3});
}

TYPED_TEST(symmetric_window, a_peer_outside_the_window_is_an_error_naming_it) {
  TypeParam::run([](communicator auto& comm) {
    const auto window = shardwise::symmetric_window<float>::create(comm, 1, 1);
    ASSERT_TRUE(window.has_value());
    const int P = comm.size();
    const std::string rank = "[rank " + std::to_string(comm.world_rank()) + "] ";
    const std::string range = " is out of range: there are " + std::to_string(P) + ", numbered from 0";
    EXPECT_EQ(message_of<argument_error>([&] { (void)window->peer_buffer(P); }),
              rank + "symmetric_window::peer_buffer: peer " + std::to_string(P) + range);
    EXPECT_EQ(message_of<argument_error>([&] { (void)window->peer_flags(-1); }),
              rank + "symmetric_window::peer_flags: peer -1" + range);
    const auto memory = share_memory(comm, 8);
    ASSERT_TRUE(memory.has_value());
    EXPECT_EQ(message_of<argument_error>([&] { (void)memory->block(P + 1); }),
              rank + "shared_memory::block: rank " + std::to_string(P + 1) + range);
    comm.barrier();
  });
}

}  // namespace
