// What only the MPI backend can get wrong: errors MPI itself reports come back as mpi_error carrying
// MPI's own text, the int limit of MPI counts, and communicators that stay independent of each other
// and of the user's MPI_COMM_WORLD. Runs under mpiexec only.
#include <gtest/gtest.h>
#include <mpi.h>
#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "shardwise/comm/mpi.hpp"

namespace {

using shardwise::argument_error;
using shardwise::mpi_error;
using shardwise::mpi::communicator;

std::string mpi_text_of(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return {text, static_cast<std::size_t>(length)};
}

int error_class_of(int code) {
  int error_class = 0;
  MPI_Error_class(code, &error_class);
  return error_class;
}

// Every rank sends four ints to the next rank, which receives into room for two: MPI_ERR_TRUNCATE.
// (Argument checks cannot see this: only the receiver's MPI knows the incoming size.)
TEST(mpi_errors, truncated_receive_is_an_mpi_error_with_mpis_text) {
  auto world = communicator::world();
  const int next = (world.rank() + 1) % world.size();
  const int previous = (world.rank() + world.size() - 1) % world.size();
  const std::vector<int> four{1, 2, 3, 4};
  std::vector<int> two(2);
  for (const bool started : {false, true}) {
    auto sent = world.isend(four, next, 5);
    try {
      if (started) {
        auto received = world.irecv(two, previous, 5);
        received.wait();
      } else {
        world.recv(two, previous, 5);
      }
      ADD_FAILURE() << "a truncated receive did not throw (" << (started ? "irecv" : "recv") << ")";
    } catch (const mpi_error& e) {
      const std::string what = e.what();
      EXPECT_EQ(error_class_of(e.code()), MPI_ERR_TRUNCATE) << what;
      EXPECT_EQ(e.rank(), world.world_rank());
      EXPECT_EQ(e.operation(), "recv");
      EXPECT_NE(what.find("[rank " + std::to_string(world.world_rank()) + "] recv: "), std::string::npos) << what;
      EXPECT_NE(what.find(mpi_text_of(e.code())), std::string::npos) << what;
    }
    sent.wait();
  }
  // The communicator is still usable afterwards.
  std::vector<int> one{1};
  world.all_reduce(one);
  EXPECT_EQ(one[0], world.size());
}

// A request whose wait failed is finished: waiting again or destroying it does nothing.
TEST(mpi_errors, a_failed_request_is_finished) {
  auto world = communicator::world();
  const int next = (world.rank() + 1) % world.size();
  const int previous = (world.rank() + world.size() - 1) % world.size();
  const std::vector<double> three{1.0, 2.0, 3.0};
  std::vector<double> one(1);
  auto sent = world.isend(three, next, 6);
  auto received = world.irecv(one, previous, 6);
  EXPECT_THROW(received.wait(), mpi_error);
  EXPECT_NO_THROW(received.wait());
  EXPECT_TRUE(received.test());
  sent.wait();
}

// A buffer whose byte count does not fit MPI's int is refused, naming the sizes, before MPI sees it.
// The 2 GiB span is address space only (never touched), so the test needs no memory.
TEST(mpi_errors, counts_beyond_mpis_int_limit_are_argument_errors) {
  auto world = communicator::world();
  constexpr std::size_t elements = std::size_t{1} << 28;  // 2^31 bytes of int64
  constexpr std::size_t length = elements * sizeof(std::int64_t);
  void* reserved = mmap(nullptr, length, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(reserved, MAP_FAILED);
  const std::span<std::int64_t> huge(static_cast<std::int64_t*>(reserved), elements);
  try {
    world.broadcast(huge, 0);
    ADD_FAILURE() << "a broadcast of 2^31 bytes was accepted";
  } catch (const argument_error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.operation(), "broadcast");
    EXPECT_NE(what.find("268435456 elements of 8 bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("2147483647"), std::string::npos) << what;
  }
  munmap(reserved, length);
}

TEST(mpi_errors, split_with_a_negative_colour_is_an_argument_error) {
  auto world = communicator::world();
  try {
    (void)world.split(-1, 0);
    ADD_FAILURE() << "split accepted colour -1";
  } catch (const argument_error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.operation(), "split");
    EXPECT_NE(what.find("[rank " + std::to_string(world.world_rank()) + "] split: colour -1 is negative"),
              std::string::npos)
        << what;
  }
}

// world() duplicates MPI_COMM_WORLD each time: same ranks, separate traffic, and the user's world keeps
// its own error handler.
TEST(mpi_errors, each_world_is_an_independent_duplicate) {
  auto first = communicator::world();
  auto second = communicator::world();
  int comparison = MPI_UNEQUAL;
  MPI_Comm_compare(first.native(), second.native(), &comparison);
  EXPECT_EQ(comparison, MPI_CONGRUENT);
  MPI_Comm_compare(first.native(), MPI_COMM_WORLD, &comparison);
  EXPECT_EQ(comparison, MPI_CONGRUENT);
  EXPECT_EQ(first.rank(), second.rank());
  int world_rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  EXPECT_EQ(first.world_rank(), world_rank);

  // Same peer, same tag, one message on each: each receive gets its own communicator's message even
  // though the one on `second` is received first.
  const int next = (first.rank() + 1) % first.size();
  const int previous = (first.rank() + first.size() - 1) % first.size();
  const std::vector<int> on_first{1}, on_second{2};
  auto a = first.isend(on_first, next, 0);
  auto b = second.isend(on_second, next, 0);
  std::vector<int> from_second(1), from_first(1);
  second.recv(from_second, previous, 0);
  first.recv(from_first, previous, 0);
  a.wait();
  b.wait();
  EXPECT_EQ(from_second[0], 2);
  EXPECT_EQ(from_first[0], 1);

  MPI_Errhandler handler = MPI_ERRHANDLER_NULL;
  MPI_Comm_get_errhandler(MPI_COMM_WORLD, &handler);
  EXPECT_EQ(handler, MPI_ERRORS_ARE_FATAL);
  MPI_Errhandler_free(&handler);
}

// Run only by CTest's mpi_test_main_ends_a_call_that_waits_too_long.mpi.3, which asks for disabled tests:
// rank 0 calls an all-reduce the other ranks never make, and the test main's watch must end the job.
TEST(mpi_test_main, DISABLED_rank_0_calls_an_all_reduce_alone) {
  auto world = communicator::world();
  std::vector<double> data(4, 1.0);
  if (world.rank() == 0) world.all_reduce(std::span<double>(data), shardwise::op::sum);
}

}  // namespace
