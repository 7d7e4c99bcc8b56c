// Every collective of the communicator concept, one body for every backend: each result is compared
// with the same computation done serially over all ranks' inputs.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "shardwise/comm/computed_on_root.hpp"
#include "support/backends.hpp"
#include "support/elements.hpp"

namespace {

using namespace shardwise;
using namespace shardwise::testing;

template <class Backend>
class collectives : public ::testing::Test {};
TYPED_TEST_SUITE(collectives, backends);

constexpr std::array all_ops = {op::sum, op::prod, op::min, op::max};
constexpr std::array<std::size_t, 5> lengths = {0, 1, 5, 13, 1000};

// The four ways to call a collective: blocking or started and waited, out of place or in place.
enum class form { blocking, in_place, started, started_in_place };
constexpr std::array all_forms = {form::blocking, form::in_place, form::started, form::started_in_place};
const char* name_of(form f) {
  switch (f) {
    case form::blocking: return "blocking";
    case form::in_place: return "in place";
    case form::started: return "non-blocking";
    case form::started_in_place: return "non-blocking in place";
  }
  return "?";
}
bool in_place(form f) { return f == form::in_place || f == form::started_in_place; }

template <class T>
std::string context(const char* what, op reduction, std::size_t n, form f, int rank) {
  return std::string(what) + "<" + element_name<T>() + ">, op " + std::string(shardwise::name_of(reduction)) +
         ", n = " + std::to_string(n) + ", " + name_of(f) + ", rank " + std::to_string(rank);
}

TYPED_TEST(collectives, all_reduce_equals_serial_reduction) {
  TypeParam::run([](communicator auto& comm) {
    for_each_element_type([&]<class T>() {
      for (const op reduction : all_ops)
        for (const std::size_t n : lengths)
          for (const form f : all_forms) {
            auto data = contributions<T>(reduction, comm.rank(), n);
            std::vector<T> out(n);
            switch (f) {
              case form::blocking: comm.all_reduce(data, out, reduction); break;
              case form::in_place: comm.all_reduce(data, reduction); break;
              case form::started: comm.iall_reduce(data, out, reduction).wait(); break;
              case form::started_in_place: comm.iall_reduce(data, reduction).wait(); break;
            }
            EXPECT_TRUE(same_elements(in_place(f) ? data : out, serial_reduction<T>(reduction, comm.size(), n)))
                << context<T>("all_reduce", reduction, n, f, comm.rank());
          }
    });
  });
}

// With random (not integer) floats the summation order shows in the bits: a backend that sums in
// rank order matches the serial sum exactly; others within rounding.
TYPED_TEST(collectives, all_reduce_of_random_floats) {
  TypeParam::run([](communicator auto& comm) {
    constexpr std::size_t n = 4099;
    auto values_of = [](int rank) {
      std::mt19937 generator(static_cast<unsigned>(1234 + rank));
      std::uniform_real_distribution<float> distribution(-1.0F, 1.0F);
      std::vector<float> values(n);
      for (auto& v : values) v = distribution(generator);
      return values;
    };
    std::vector<float> expected(n, 0.0F);
    for (int r = 0; r < comm.size(); ++r) {
      const auto contribution = values_of(r);
      for (std::size_t i = 0; i < n; ++i) expected[i] = r == 0 ? contribution[i] : expected[i] + contribution[i];
    }
    std::vector<float> out(n);
    comm.all_reduce(values_of(comm.rank()), out, op::sum);
    for (std::size_t i = 0; i < n; ++i) {
      if constexpr (TypeParam::sums_in_rank_order) {
        ASSERT_EQ(out[i], expected[i]) << "element " << i << " on rank " << comm.rank();
      } else {
        ASSERT_NEAR(out[i], expected[i], 1e-5F * static_cast<float>(comm.size())) << "element " << i;
      }
    }
  });
}

TYPED_TEST(collectives, reduce_delivers_at_every_root) {
  TypeParam::run([](communicator auto& comm) {
    for_each_element_type([&]<class T>() {
      for (const op reduction : all_ops)
        for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{37}})
          for (int root = 0; root < comm.size(); ++root)
            for (const form f : all_forms) {
              auto data = contributions<T>(reduction, comm.rank(), n);
              // Non-roots may pass an empty output.
              std::vector<T> out(comm.rank() == root ? n : 0);
              switch (f) {
                case form::blocking: comm.reduce(data, out, reduction, root); break;
                case form::in_place: comm.reduce(data, reduction, root); break;
                case form::started: comm.ireduce(data, out, reduction, root).wait(); break;
                case form::started_in_place: comm.ireduce(data, reduction, root).wait(); break;
              }
              if (comm.rank() == root) {
                EXPECT_TRUE(same_elements(in_place(f) ? data : out, serial_reduction<T>(reduction, comm.size(), n)))
                    << context<T>("reduce", reduction, n, f, comm.rank()) << ", root " << root;
              }
            }
    });
  });
}

TYPED_TEST(collectives, reduce_scatter_gives_each_rank_its_block) {
  TypeParam::run([](communicator auto& comm) {
    const auto ranks = static_cast<std::size_t>(comm.size());
    const auto rank = static_cast<std::size_t>(comm.rank());
    for_each_element_type([&]<class T>() {
      for (const op reduction : all_ops)
        // 20000: blocks of 64 KiB or more (but bf16's), which the MPI backend reduces in a ring.
        for (const std::size_t block : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{20000}})
          for (const form f : all_forms) {
            auto data = contributions<T>(reduction, comm.rank(), block * ranks);
            std::vector<T> out(block);
            switch (f) {
              case form::blocking: comm.reduce_scatter(data, out, reduction); break;
              case form::in_place: comm.reduce_scatter(data, reduction); break;
              case form::started: comm.ireduce_scatter(data, out, reduction).wait(); break;
              case form::started_in_place: comm.ireduce_scatter(data, reduction).wait(); break;
            }
            const auto whole = serial_reduction<T>(reduction, comm.size(), block * ranks);
            const std::vector<T> expected(whole.begin() + static_cast<long>(rank * block),
                                          whole.begin() + static_cast<long>((rank + 1) * block));
            const std::vector<T> actual = in_place(f)
                                              ? std::vector<T>(data.begin() + static_cast<long>(rank * block),
                                                               data.begin() + static_cast<long>((rank + 1) * block))
                                              : out;
            EXPECT_TRUE(same_elements(actual, expected))
                << context<T>("reduce_scatter", reduction, block, f, comm.rank());
          }
    });
  });
}

TYPED_TEST(collectives, all_gather_concatenates_in_rank_order) {
  TypeParam::run([](communicator auto& comm) {
    const auto ranks = static_cast<std::size_t>(comm.size());
    for_each_element_type([&]<class T>() {
      for (const std::size_t block : {std::size_t{0}, std::size_t{1}, std::size_t{9}})
        for (const form f : all_forms) {
          std::vector<T> mine(block);
          for (std::size_t i = 0; i < block; ++i) mine[i] = tagged<T>(comm.rank(), i);
          std::vector<T> out(block * ranks);
          if (in_place(f))
            std::copy(mine.begin(), mine.end(),
                      out.begin() + static_cast<long>(block * static_cast<std::size_t>(comm.rank())));
          switch (f) {
            case form::blocking: comm.all_gather(mine, out); break;
            case form::in_place: comm.all_gather(out); break;
            case form::started: comm.iall_gather(mine, out).wait(); break;
            case form::started_in_place: comm.iall_gather(out).wait(); break;
          }
          std::vector<T> expected;
          for (int r = 0; r < comm.size(); ++r)
            for (std::size_t i = 0; i < block; ++i) expected.push_back(tagged<T>(r, i));
          EXPECT_TRUE(same_elements(out, expected)) << context<T>("all_gather", op::sum, block, f, comm.rank());
        }
    });
  });
}

TYPED_TEST(collectives, all_to_all_transposes_blocks) {
  TypeParam::run([](communicator auto& comm) {
    const auto ranks = static_cast<std::size_t>(comm.size());
    for_each_element_type([&]<class T>() {
      for (const std::size_t block : {std::size_t{0}, std::size_t{1}, std::size_t{6}})
        for (const form f : all_forms) {
          // Element i of block d on rank s encodes (s, d, i).
          auto value = [&](int source, std::size_t destination, std::size_t i) {
            return tagged<T>(source, destination * block + i);
          };
          std::vector<T> data(block * ranks);
          for (std::size_t d = 0; d < ranks; ++d)
            for (std::size_t i = 0; i < block; ++i) data[d * block + i] = value(comm.rank(), d, i);
          std::vector<T> out(block * ranks);
          switch (f) {
            case form::blocking: comm.all_to_all(data, out); break;
            case form::in_place: comm.all_to_all(data); break;
            case form::started: comm.iall_to_all(data, out).wait(); break;
            case form::started_in_place: comm.iall_to_all(data).wait(); break;
          }
          std::vector<T> expected(block * ranks);
          for (std::size_t s = 0; s < ranks; ++s)
            for (std::size_t i = 0; i < block; ++i)
              expected[s * block + i] = value(static_cast<int>(s), static_cast<std::size_t>(comm.rank()), i);
          EXPECT_TRUE(same_elements(in_place(f) ? data : out, expected))
              << context<T>("all_to_all", op::sum, block, f, comm.rank());
        }
    });
  });
}

const char* stores_name(output_stores stores) {
  switch (stores) {
    case output_stores::by_size: return "by size";
    case output_stores::through_caches: return "through the caches";
    case output_stores::around_caches: return "around the caches";
  }
  return "?";
}

TYPED_TEST(collectives, all_to_all_v_with_uneven_and_empty_blocks) {
  TypeParam::run([](communicator auto& comm) {
    const int ranks = comm.size();
    for_each_element_type([&]<class T>() {
      for (const int pattern : {0, 1, 2, 37}) {
        // count(s, d): elements rank s sends to rank d; pattern 0 leaves some pairs empty, pattern 37
        // sends up to 39 elements, blocks that start anywhere in a cache line and span several.
        auto count = [&](int s, int d) { return (s * 3 + d * 5 + pattern) % (pattern + 3); };
        std::vector<int> send_counts(static_cast<std::size_t>(ranks));
        std::vector<int> receive_counts(static_cast<std::size_t>(ranks));
        for (int r = 0; r < ranks; ++r) {
          send_counts[static_cast<std::size_t>(r)] = count(comm.rank(), r);
          receive_counts[static_cast<std::size_t>(r)] = count(r, comm.rank());
        }
        auto value = [&](int s, int d, int i) { return tagged<T>(s, static_cast<std::size_t>(d * 100 + i)); };
        std::vector<T> data;
        for (int d = 0; d < ranks; ++d)
          for (int i = 0; i < count(comm.rank(), d); ++i) data.push_back(value(comm.rank(), d, i));
        std::vector<T> expected;
        for (int s = 0; s < ranks; ++s)
          for (int i = 0; i < count(s, comm.rank()); ++i) expected.push_back(value(s, comm.rank(), i));
        // Each way of storing the output: the threads backend stores around the caches only at 4 MiB a
        // rank when left to decide.
        for (const auto stores : {output_stores::by_size, output_stores::through_caches, output_stores::around_caches})
          for (const bool started : {false, true}) {
            std::vector<T> out(expected.size());
            if (started) comm.iall_to_all_v(data, send_counts, out, receive_counts, stores).wait();
            else
              comm.all_to_all_v(data, send_counts, out, receive_counts, stores);
            EXPECT_TRUE(same_elements(out, expected))
                << "all_to_all_v<" << element_name<T>() << "> pattern " << pattern << (started ? " non-blocking" : "")
                << " stored " << stores_name(stores) << " on rank " << comm.rank();
          }
      }
    });
  });
}

TYPED_TEST(collectives, broadcast_from_every_root) {
  TypeParam::run([](communicator auto& comm) {
    for_each_element_type([&]<class T>() {
      for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{33}})
        for (int root = 0; root < comm.size(); ++root)
          for (const bool started : {false, true}) {
            std::vector<T> data(n);
            for (std::size_t i = 0; i < n; ++i) data[i] = tagged<T>(comm.rank(), i);
            if (started) comm.ibroadcast(data, root).wait();
            else
              comm.broadcast(data, root);
            std::vector<T> expected(n);
            for (std::size_t i = 0; i < n; ++i) expected[i] = tagged<T>(root, i);
            EXPECT_TRUE(same_elements(data, expected))
                << "broadcast<" << element_name<T>() << "> n = " << n << " root " << root << " on rank " << comm.rank();
          }
    });
  });
}

TYPED_TEST(collectives, computed_on_root_gives_every_rank_the_roots_result_or_its_failure) {
  TypeParam::run([](communicator auto& comm) {
    for (int root = 0; root < comm.size(); ++root) {
      int computed = 0;
      const auto result = computed_on_root<double>(comm, root, 3, "test", [&] {
        ++computed;
        return std::vector<double>{1.5 * root, 2.0, -3.25};
      });
      EXPECT_EQ(result, (std::vector<double>{1.5 * root, 2.0, -3.25})) << "root " << root << " on rank " << comm.rank();
      EXPECT_EQ(computed, comm.rank() == root ? 1 : 0) << "only the root computes";
    }
    // A failure at the root reaches every rank: the root's own error there, a peer_error elsewhere.
    const int root = comm.size() - 1;
    const auto failing = [&](bool wrong_length) {
      return computed_on_root<std::int64_t>(comm, root, 2, "test", [&]() -> std::vector<std::int64_t> {
        if (wrong_length) return {1, 2, 3};
        throw std::runtime_error("the model failed");
      });
    };
    if (comm.rank() == root) {
      EXPECT_THROW((void)failing(false), std::runtime_error);
      try {
        (void)failing(true);
        ADD_FAILURE() << "a result of the wrong length was taken";
      } catch (const argument_error& e) {
        EXPECT_NE(std::string(e.what()).find("computed 3 values where every rank expects 2"), std::string::npos)
            << e.what();
      }
    } else {
      for (const bool wrong_length : {false, true}) {
        try {
          (void)failing(wrong_length);
          ADD_FAILURE() << "rank " << comm.rank() << " went on without the root's result";
        } catch (const peer_error& e) {
          EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(root) + " failed"), std::string::npos)
              << e.what();
        }
      }
    }
  });
}

// Buffers of several MiB take the cache-bypassing store path, here deliberately misaligned (one
// element into the allocation) so its unaligned head and tail are exercised too.
TYPED_TEST(collectives, large_misaligned_buffers) {
  TypeParam::run(
      [](communicator auto& comm) {
        const auto ranks = static_cast<std::size_t>(comm.size());
        const std::size_t n = (std::size_t{3} << 20) / ranks * ranks + ranks * 3;  // ~12 MiB of floats
        auto misaligned = [](std::vector<float>& storage) { return std::span<float>(storage).subspan(1); };

        std::vector<float> in_storage(n + 1), out_storage(n + 1);
        auto in = misaligned(in_storage);
        auto out = misaligned(out_storage);
        for (std::size_t i = 0; i < n; ++i) in[i] = contribution<float>(op::sum, comm.rank(), i);
        comm.all_reduce(in, out, op::sum);
        EXPECT_TRUE(same_elements<float>(out, serial_reduction<float>(op::sum, comm.size(), n))) << "all_reduce";

        const std::size_t block = n / ranks;
        comm.reduce_scatter(in, out.first(block), op::max);
        const auto maxima = serial_reduction<float>(op::max, comm.size(), n);
        EXPECT_TRUE(same_elements<float>(out.first(block), std::span<const float>(maxima).subspan(
                                                               block * static_cast<std::size_t>(comm.rank()), block)))
            << "reduce_scatter";

        for (std::size_t i = 0; i < block; ++i) in[i] = tagged<float>(comm.rank(), i);
        comm.all_gather(in.first(block), out);
        for (std::size_t r = 0; r < ranks; ++r)
          for (const std::size_t i : {std::size_t{0}, block / 2, block - 1})
            ASSERT_EQ(out[r * block + i], tagged<float>(static_cast<int>(r), i)) << "all_gather block " << r;

        for (std::size_t i = 0; i < n; ++i) in[i] = tagged<float>(comm.rank(), i);
        comm.all_to_all(in, out);
        for (std::size_t r = 0; r < ranks; ++r)
          for (const std::size_t i : {std::size_t{0}, block - 1})
            ASSERT_EQ(out[r * block + i],
                      tagged<float>(static_cast<int>(r), static_cast<std::size_t>(comm.rank()) * block + i))
                << "all_to_all block " << r;

        comm.broadcast(in, 0);
        for (const std::size_t i : {std::size_t{0}, n / 3, n - 1}) ASSERT_EQ(in[i], tagged<float>(0, i)) << "broadcast";
      },
      {1, 2, 3});
}

// Point to point: a ring in both directions, with non-blocking sends and receives posted before any
// is waited on, and several messages per pair and tag that must arrive in order.
TYPED_TEST(collectives, send_and_recv_around_a_ring) {
  TypeParam::run([](communicator auto& comm) {
    const int next = (comm.rank() + 1) % comm.size();
    const int previous = (comm.rank() + comm.size() - 1) % comm.size();
    for_each_element_type([&]<class T>() {
      constexpr int messages = 3;
      std::vector<std::vector<T>> outgoing(messages), incoming(messages);
      for (int m = 0; m < messages; ++m) {
        outgoing[static_cast<std::size_t>(m)].resize(static_cast<std::size_t>(m) * 4 + 1);
        for (std::size_t i = 0; i < outgoing[static_cast<std::size_t>(m)].size(); ++i)
          outgoing[static_cast<std::size_t>(m)][i] = tagged<T>(comm.rank(), static_cast<std::size_t>(m) * 10 + i);
        incoming[static_cast<std::size_t>(m)].resize(outgoing[static_cast<std::size_t>(m)].size());
      }
      std::vector<typename std::remove_cvref_t<decltype(comm)>::request> started;
      for (int m = 0; m < messages; ++m)
        started.push_back(comm.irecv(incoming[static_cast<std::size_t>(m)], previous, 7));
      for (int m = 0; m < messages; ++m) started.push_back(comm.isend(outgoing[static_cast<std::size_t>(m)], next, 7));
      for (auto it = started.rbegin(); it != started.rend(); ++it) it->wait();
      for (int m = 0; m < messages; ++m) {
        std::vector<T> expected(incoming[static_cast<std::size_t>(m)].size());
        for (std::size_t i = 0; i < expected.size(); ++i)
          expected[i] = tagged<T>(previous, static_cast<std::size_t>(m) * 10 + i);
        EXPECT_TRUE(same_elements(incoming[static_cast<std::size_t>(m)], expected))
            << "message " << m << " of " << element_name<T>() << " on rank " << comm.rank();
      }
      // Blocking: send to the previous rank, receive from the next, on another tag.
      comm.send(outgoing[1], previous, 3);
      std::vector<T> received(outgoing[1].size());
      comm.recv(received, next, 3);
      std::vector<T> expected(received.size());
      for (std::size_t i = 0; i < expected.size(); ++i) expected[i] = tagged<T>(next, 10 + i);
      EXPECT_TRUE(same_elements(received, expected)) << "blocking recv of " << element_name<T>();
    });
  });
}

// A receive must be exactly the size of the message (MPI alone would accept a shorter one); the sender
// completes either way.
TYPED_TEST(collectives, a_receive_of_the_wrong_size_is_an_error) {
  TypeParam::run(
      [](communicator auto& comm) {
        if (comm.rank() == 0) {
          std::vector<float> data(10);
          comm.isend(data, 1, 5).wait();
        } else if (comm.rank() == 1) {
          std::vector<float> data(12);
          try {
            comm.recv(data, 0, 5);
            ADD_FAILURE() << "a 10-element message filled a 12-element receive";
          } catch (const argument_error& e) {
            const std::string what = e.what();
            EXPECT_NE(what.find("rank 0 sent 40 bytes with tag 5"), std::string::npos) << what;
            EXPECT_NE(what.find("holds 48 bytes"), std::string::npos) << what;
          }
        }
      },
      {2, 3, 8});
}

// A started barrier cannot complete while one rank is missing: rank 0 joins only after every other
// rank has seen its own barrier still pending.
TYPED_TEST(collectives, barrier_waits_for_every_rank) {
  TypeParam::run(
      [](communicator auto& comm) {
        if (comm.rank() == 0) {
          std::vector<int> flag(1);
          for (int r = 1; r < comm.size(); ++r) {
            comm.recv(flag, r, 1);
            EXPECT_EQ(flag[0], 0) << "rank " << r << " completed a barrier that rank 0 had not joined";
          }
          comm.ibarrier().wait();  // MPI matches a started barrier only with started barriers
        } else {
          auto pending = comm.ibarrier();
          std::vector<int> completed{pending.test() ? 1 : 0};
          comm.send(completed, 0, 1);
          pending.wait();
        }
      },
      {2, 3, 8});
}

// Several collectives in flight at once, completed in the opposite order they were started.
TYPED_TEST(collectives, outstanding_collectives_complete_in_any_order) {
  TypeParam::run([](communicator auto& comm) {
    const auto ranks = static_cast<std::size_t>(comm.size());
    auto summed = contributions<double>(op::sum, comm.rank(), 100);
    std::vector<std::int64_t> gathered(3 * ranks);
    const std::vector<std::int64_t> mine{comm.rank(), comm.rank() * 2, comm.rank() * 3};
    std::vector<float> broadcast_data(17, static_cast<float>(comm.rank()));
    auto first = comm.iall_reduce(summed, op::sum);
    auto second = comm.iall_gather(mine, gathered);
    auto third = comm.ibroadcast(broadcast_data, comm.size() - 1);
    while (!third.test()) {
    }
    second.wait();
    first.wait();
    EXPECT_TRUE(same_elements(summed, serial_reduction<double>(op::sum, comm.size(), 100)));
    for (std::size_t r = 0; r < ranks; ++r) {
      const auto value = static_cast<std::int64_t>(r);
      EXPECT_EQ(gathered[3 * r], value);
      EXPECT_EQ(gathered[3 * r + 2], 3 * value);
    }
    EXPECT_EQ(broadcast_data[16], static_cast<float>(comm.size() - 1));
  });
}

// More collectives in flight than a backend may keep meeting places for (the threads backend keeps a
// few, then meets in operations of their own), a blocking one among them, completed in an order that
// differs from rank to rank.
TYPED_TEST(collectives, many_outstanding_collectives_meet_their_own_peers) {
  TypeParam::run([](communicator auto& comm) {
    constexpr std::int64_t calls = 50;
    constexpr std::int64_t blocking_at = 20;
    constexpr std::size_t length = 3;
    const std::int64_t ranks = comm.size();
    std::vector<std::vector<std::int64_t>> data;
    for (std::int64_t i = 0; i < calls; ++i) {
      std::vector<std::int64_t> mine(length);
      for (std::size_t k = 0; k < length; ++k) mine[k] = (comm.rank() + 1) * (i + 1) + static_cast<std::int64_t>(k);
      data.push_back(std::move(mine));
    }
    std::vector<typename std::remove_cvref_t<decltype(comm)>::request> started;
    for (std::int64_t i = 0; i < calls; ++i) {
      if (i == blocking_at) {
        comm.all_reduce(data[static_cast<std::size_t>(i)], op::sum);
      } else {
        started.push_back(comm.iall_reduce(data[static_cast<std::size_t>(i)], op::sum));
      }
    }
    if (comm.rank() % 2 == 0) {
      for (auto it = started.rbegin(); it != started.rend(); ++it) it->wait();
    } else {
      for (auto& request : started) request.wait();
    }
    for (std::int64_t i = 0; i < calls; ++i)
      for (std::size_t k = 0; k < length; ++k)
        EXPECT_EQ(data[static_cast<std::size_t>(i)][k],
                  (i + 1) * ranks * (ranks + 1) / 2 + ranks * static_cast<std::int64_t>(k))
            << "call " << i << ", element " << k << ", rank " << comm.rank();
  });
}

TYPED_TEST(collectives, split_orders_by_key_then_rank) {
  TypeParam::run([](communicator auto& world) {
    const int color = world.rank() % 2;
    // Reverse order within each colour via the key.
    auto half = world.split(color, -world.rank());
    std::vector<int> members;
    for (int r = world.size() - 1; r >= 0; --r)
      if (r % 2 == color) members.push_back(r);
    ASSERT_EQ(half.size(), static_cast<int>(members.size()));
    EXPECT_EQ(members[static_cast<std::size_t>(half.rank())], world.rank());
    std::vector<int> gathered(members.size());
    half.all_gather(std::vector<int>{world.rank()}, gathered);
    EXPECT_EQ(gathered, members);
    // Equal keys keep the parent's order; a split of a split works too.
    auto again = half.split(0, 0);
    EXPECT_EQ(again.rank(), half.rank());
    std::vector<int> total{1};
    again.all_reduce(total, op::sum);
    EXPECT_EQ(total[0], again.size());
  });
}

// What one rank can see wrong in its own call throws argument_error naming the operation, the rank and
// the sizes, before anything is sent.
TYPED_TEST(collectives, wrong_sizes_are_named_errors) {
  TypeParam::run([](communicator auto& comm) {
    const auto ranks = static_cast<std::size_t>(comm.size());
    std::vector<float> three(3), four(4), many(3 * ranks + 1);
    auto expect_error = [&](auto&& call, const std::string& operation, const std::string& detail) {
      try {
        call();
        ADD_FAILURE() << operation << " accepted wrong sizes on rank " << comm.rank();
      } catch (const argument_error& e) {
        const std::string what = e.what();
        EXPECT_EQ(e.operation(), operation);
        EXPECT_NE(what.find("[rank " + std::to_string(comm.world_rank()) + "] " + operation), std::string::npos)
            << what;
        EXPECT_NE(what.find(detail), std::string::npos) << what;
      }
    };
    expect_error([&] { comm.all_reduce(three, four); }, "all_reduce", "input has 3 elements, output has 4");
    expect_error([&] { (void)comm.iall_reduce(three, four); }, "all_reduce", "input has 3 elements, output has 4");
    expect_error([&] { comm.reduce_scatter(three, four); }, "reduce_scatter", "input has 3 elements, output has 4");
    expect_error([&] { comm.all_gather(three, many); }, "all_gather", "output has " + std::to_string(many.size()));
    expect_error([&] { comm.all_to_all(three, four); }, "all_to_all", "input has 3 elements, output has 4");
    expect_error([&] { comm.broadcast(three, comm.size()); }, "broadcast",
                 "root " + std::to_string(comm.size()) + " is not a rank");
    expect_error([&] { comm.reduce(three, four, op::sum, -1); }, "reduce", "root -1 is not a rank");
    expect_error([&] { comm.send(three, comm.size() + 2, 0); }, "send", "destination");
    const std::vector<int> short_counts(ranks + 1, 0);
    expect_error([&] { comm.all_to_all_v(three, short_counts, four, short_counts); }, "all_to_all_v",
                 "send_counts has " + std::to_string(ranks + 1) + " entries");
    if (ranks > 1) {
      expect_error([&] { comm.reduce_scatter(many); }, "reduce_scatter", "not divisible");
    }
    // After rejected calls every rank is still in step.
    std::vector<int> one{1};
    comm.all_reduce(one, op::sum);
    EXPECT_EQ(one[0], comm.size());
  });
}

// Every call adds its ring-algorithm volume to traffic() (comm/traffic.hpp): written out here per call,
// with a block of 3 doubles per rank (24 bytes) and P ranks.
TYPED_TEST(collectives, traffic_counts_each_call_and_its_bytes) {
  TypeParam::run([](communicator auto& comm) {
    const int ranks = comm.size();
    const int rank = comm.rank();
    const std::int64_t block = 3 * sizeof(double);
    const std::int64_t others = ranks - 1;
    std::vector<double> one_block(3, 1.0);
    std::vector<double> blocks(static_cast<std::size_t>(3 * ranks), 1.0);
    std::vector<double> out_blocks(blocks.size());
    auto expect_call = [&](auto&& call, std::int64_t sent, std::int64_t received, const char* what) {
      const traffic_count before = comm.traffic();
      call();
      EXPECT_EQ(comm.traffic() - before, (traffic_count{1, sent, received})) << what << ", rank " << rank;
    };
    expect_call([&] { comm.all_gather(one_block, out_blocks); }, others * block, others * block, "all_gather");
    expect_call([&] { comm.iall_gather(one_block, out_blocks).wait(); }, others * block, others * block, "iall_gather");
    expect_call([&] { comm.reduce_scatter(blocks, one_block); }, others * block, others * block, "reduce_scatter");
    expect_call([&] { comm.all_to_all(blocks, out_blocks); }, others * block, others * block, "all_to_all");
    // 3P doubles all-reduced: 2 (P-1)/P of them each way.
    expect_call([&] { comm.all_reduce(blocks); }, 2 * others * block, 2 * others * block, "all_reduce");
    expect_call([&] { comm.broadcast(blocks, 0); }, rank == 0 && ranks > 1 ? ranks * block : 0,
                rank == 0 ? 0 : ranks * block, "broadcast");
    expect_call([&] { comm.reduce(one_block, op::sum, 0); }, rank == 0 ? 0 : block, rank == 0 ? others * block : 0,
                "reduce");
    // all_to_all_v: r + 1 doubles to rank r; what stays on this rank is not traffic.
    std::vector<int> send_counts(static_cast<std::size_t>(ranks));
    std::iota(send_counts.begin(), send_counts.end(), 1);
    const std::vector<int> receive_counts(static_cast<std::size_t>(ranks), rank + 1);
    std::vector<double> v_in(static_cast<std::size_t>(ranks * (ranks + 1) / 2));
    std::vector<double> v_out(static_cast<std::size_t>(ranks * (rank + 1)));
    const std::int64_t sent_v = static_cast<std::int64_t>(sizeof(double)) * (ranks * (ranks + 1) / 2 - (rank + 1));
    const std::int64_t received_v = static_cast<std::int64_t>(sizeof(double)) * others * (rank + 1);
    expect_call([&] { comm.all_to_all_v(v_in, send_counts, v_out, receive_counts); }, sent_v, received_v,
                "all_to_all_v");
    expect_call([&] { comm.barrier(); }, 0, 0, "barrier");
    // Point to point around a ring: one message out, one in.
    const traffic_count before = comm.traffic();
    std::vector<double> incoming(3);
    auto outgoing = comm.isend(one_block, (rank + 1) % ranks, 7);
    comm.recv(incoming, (rank + ranks - 1) % ranks, 7);
    outgoing.wait();
    EXPECT_EQ(comm.traffic() - before, (traffic_count{2, block, block})) << "send and recv, rank " << rank;
  });
}

}  // namespace
