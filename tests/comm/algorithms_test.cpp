// Every collective run by every algorithm that applies (comm/algorithms/), through the communicator's
// own isend and irecv, one body for threads and MPI: each result equals the serial computation on all
// ranks' data, for block sizes that the rank count divides and that it does not. The hierarchical
// all-reduce, and the rings in more than 2 channels (rotated in their nodes), run in nodes of 1, 2 and
// all ranks, wherever they divide the rank count.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "shardwise/comm/algorithms/collectives.hpp"
#include "support/backends.hpp"
#include "support/elements.hpp"

namespace {

using namespace shardwise;
using namespace shardwise::testing;

template <class Backend>
class collective_algorithms : public ::testing::Test {};
TYPED_TEST_SUITE(collective_algorithms, backends);

constexpr std::initializer_list<int> rank_counts = {1, 2, 3, 4, 5, 8};
constexpr std::array all_ops = {op::sum, op::prod, op::min, op::max};
constexpr std::array all_algorithms = {
    algorithm::ring,        algorithm::recursive_doubling, algorithm::rabenseifner, algorithm::pairwise,
    algorithm::direct,      algorithm::binomial,           algorithm::pipelined,    algorithm::dissemination,
    algorithm::hierarchical};

struct choice {
  algorithm chosen;
  placement where;
  int channels = 1;
};

// The algorithms of `kind` that apply on `ranks` ranks, each in every number of channels it can run
// in: the hierarchical one in every node width of 1, 2 and `ranks` that divides `ranks`; the ring in
// nodes of 1, and in the wider ones where they let it run more than 2 channels (in 1 or 2 the nodes
// do not change its rings).
std::vector<choice> algorithms_for(collective kind, int ranks) {
  std::vector<choice> found;
  for (const algorithm a : all_algorithms) {
    std::vector<int> widths{1};
    if (a == algorithm::hierarchical || a == algorithm::ring)
      for (const int k : {2, ranks})
        if (k > widths.back()) widths.push_back(k);
    for (const int k : widths)
      for (int channels = 1; channels <= most_channels(a, {k}); channels *= 2)
        if ((a != algorithm::ring || k == 1 || channels > 2) && applies(kind, a, ranks, {k}, channels))
          found.push_back({a, {k}, channels});
  }
  return found;
}

// How many of algorithms_for(all_reduce, ranks) are rotated rings: in nodes of k, channels 4 up to
// 2·k (k rounded down to a power of two), for k = 2 and k = ranks.
int rotated_rings(int ranks) {
  switch (ranks) {
    case 2:
    case 3: return 1;  // nodes of 2 or 3: 4 channels
    case 4: return 3;  // nodes of 2: 4; nodes of 4: 4 and 8
    case 5: return 2;  // nodes of 5: 4 and 8
    case 8: return 4;  // nodes of 2: 4; nodes of 8: 4, 8 and 16
    default: return 0;
  }
}

std::string context(collective kind, choice c, std::size_t n, bool in_place, int rank) {
  return std::string(name_of(kind)) + " by " + algorithms::detail::chosen_text(c.chosen, c.where, c.channels) +
         ", n = " + std::to_string(n) + (in_place ? ", in place" : "") + ", rank " + std::to_string(rank);
}

std::vector<float> random_floats(int rank, std::size_t n) {
  std::mt19937 generator(static_cast<unsigned>(97 + rank));
  std::uniform_real_distribution<float> distribution(-1.0F, 1.0F);
  std::vector<float> values(n);
  for (auto& v : values) v = distribution(generator);
  return values;
}
std::vector<float> serial_sum_of_random_floats(int ranks, std::size_t n) {
  std::vector<float> sum(n, 0.0F);
  for (int r = 0; r < ranks; ++r) {
    const auto values = random_floats(r, n);
    for (std::size_t i = 0; i < n; ++i) sum[i] += values[i];
  }
  return sum;
}
void expect_near(const std::vector<float>& actual, const std::vector<float>& expected, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (std::size_t i = 0; i < actual.size(); ++i)
    ASSERT_NEAR(actual[i], expected[i], 1e-5F) << what << ", element " << i;
}

TYPED_TEST(collective_algorithms, all_reduce_equals_serial_reduction) {
  TypeParam::run(
      [](communicator auto& comm) {
        // Ring in 1 and 2 channels, recursive doubling, Rabenseifner, and hierarchical in 1, 2 and 4
        // channels in nodes of 1, of 2 (P even, P > 2), of P; and the rotated rings.
        const int ranks = comm.size();
        const std::size_t node_widths = ranks == 1 ? 1 : ranks % 2 == 0 && ranks > 2 ? 3 : 2;
        ASSERT_EQ(algorithms_for(collective::all_reduce, ranks).size(),
                  4 + 3 * node_widths + static_cast<std::size_t>(rotated_rings(ranks)));
        for (const choice a : algorithms_for(collective::all_reduce, ranks)) {
          for (const std::size_t n : {0, 1, 7, 64, 1001})
            for (const bool in_place : {false, true}) {
              for (const op reduction : all_ops) {
                auto data = contributions<std::int64_t>(reduction, comm.rank(), n);
                std::vector<std::int64_t> out(n);
                if (in_place) algorithms::all_reduce(comm, data, data, reduction, a.chosen, a.where, a.channels);
                else
                  algorithms::all_reduce(comm, data, out, reduction, a.chosen, a.where, a.channels);
                EXPECT_TRUE(
                    same_elements(in_place ? data : out, serial_reduction<std::int64_t>(reduction, comm.size(), n)))
                    << context(collective::all_reduce, a, n, in_place, comm.rank()) << ", op " << name_of(reduction);
              }
              std::vector<float> sums(n);
              algorithms::all_reduce(comm, random_floats(comm.rank(), n), sums, op::sum, a.chosen, a.where, a.channels);
              expect_near(sums, serial_sum_of_random_floats(comm.size(), n),
                          context(collective::all_reduce, a, n, in_place, comm.rank()));
            }
        }
      },
      rank_counts);
}

TYPED_TEST(collective_algorithms, reduce_scatter_equals_serial_reduction) {
  TypeParam::run(
      [](communicator auto& comm) {
        const auto ranks = static_cast<std::size_t>(comm.size());
        const auto rank = static_cast<std::size_t>(comm.rank());
        for (const choice a : algorithms_for(collective::reduce_scatter, comm.size()))
          for (const std::size_t block : {0, 1, 5, 130})
            for (const bool in_place : {false, true}) {
              for (const op reduction : all_ops) {
                auto data = contributions<std::int64_t>(reduction, comm.rank(), block * ranks);
                const auto whole = serial_reduction<std::int64_t>(reduction, comm.size(), block * ranks);
                const std::vector<std::int64_t> expected(
                    whole.begin() + static_cast<std::ptrdiff_t>(rank * block),
                    whole.begin() + static_cast<std::ptrdiff_t>((rank + 1) * block));
                std::vector<std::int64_t> out(block);
                if (in_place) {
                  const std::span<std::int64_t> own = std::span(data).subspan(rank * block, block);
                  algorithms::reduce_scatter(comm, data, own, reduction, a.chosen, a.where, a.channels);
                  out.assign(own.begin(), own.end());
                } else {
                  algorithms::reduce_scatter(comm, data, out, reduction, a.chosen, a.where, a.channels);
                }
                EXPECT_TRUE(same_elements(out, expected))
                    << context(collective::reduce_scatter, a, block, in_place, comm.rank()) << ", op "
                    << name_of(reduction);
              }
              std::vector<float> sums(block);
              algorithms::reduce_scatter(comm, random_floats(comm.rank(), block * ranks), sums, op::sum, a.chosen,
                                         a.where, a.channels);
              const auto whole = serial_sum_of_random_floats(comm.size(), block * ranks);
              expect_near(sums,
                          std::vector<float>(whole.begin() + static_cast<std::ptrdiff_t>(rank * block),
                                             whole.begin() + static_cast<std::ptrdiff_t>((rank + 1) * block)),
                          context(collective::reduce_scatter, a, block, in_place, comm.rank()));
            }
      },
      rank_counts);
}

TYPED_TEST(collective_algorithms, all_gather_collects_every_block_in_rank_order) {
  TypeParam::run(
      [](communicator auto& comm) {
        const auto ranks = static_cast<std::size_t>(comm.size());
        const auto rank = static_cast<std::size_t>(comm.rank());
        for (const choice a : algorithms_for(collective::all_gather, comm.size()))
          for (const std::size_t block : {0, 1, 5, 130})
            for (const bool in_place : {false, true}) {
              std::vector<std::int64_t> expected(block * ranks);
              for (std::size_t i = 0; i < expected.size(); ++i)
                expected[i] = tagged<std::int64_t>(static_cast<int>(i / block), i % block);
              std::vector<std::int64_t> out(block * ranks);
              if (in_place) {
                for (std::size_t i = 0; i < block; ++i) out[rank * block + i] = tagged<std::int64_t>(comm.rank(), i);
                algorithms::all_gather(comm, std::span(out).subspan(rank * block, block), out, a.chosen, a.where,
                                       a.channels);
              } else {
                std::vector<std::int64_t> mine(block);
                for (std::size_t i = 0; i < block; ++i) mine[i] = tagged<std::int64_t>(comm.rank(), i);
                algorithms::all_gather(comm, mine, out, a.chosen, a.where, a.channels);
              }
              EXPECT_TRUE(same_elements(out, expected))
                  << context(collective::all_gather, a, block, in_place, comm.rank());
            }
      },
      rank_counts);
}

TYPED_TEST(collective_algorithms, all_to_all_transposes_blocks) {
  TypeParam::run(
      [](communicator auto& comm) {
        const auto ranks = static_cast<std::size_t>(comm.size());
        for (const choice a : algorithms_for(collective::all_to_all, comm.size()))
          for (const std::size_t block : {0, 1, 6})
            for (const bool in_place : {false, true}) {
              // Element i of block d on rank s encodes (s, d, i).
              auto value = [&](std::size_t source, std::size_t destination, std::size_t i) {
                return static_cast<std::int64_t>((source * ranks + destination) * 1000 + i);
              };
              std::vector<std::int64_t> data(block * ranks);
              std::vector<std::int64_t> expected(block * ranks);
              const auto rank = static_cast<std::size_t>(comm.rank());
              for (std::size_t d = 0; d < ranks; ++d)
                for (std::size_t i = 0; i < block; ++i) {
                  data[d * block + i] = value(rank, d, i);
                  expected[d * block + i] = value(d, rank, i);
                }
              std::vector<std::int64_t> out(block * ranks);
              algorithms::all_to_all(comm, data, in_place ? data : out, a.chosen);
              EXPECT_TRUE(same_elements(in_place ? data : out, expected))
                  << context(collective::all_to_all, a, block, in_place, comm.rank());
            }
      },
      rank_counts);
}

TYPED_TEST(collective_algorithms, broadcast_delivers_the_roots_data_from_every_root) {
  TypeParam::run(
      [](communicator auto& comm) {
        for (const choice a : algorithms_for(collective::broadcast, comm.size()))
          for (const std::size_t n : {0, 1, 37, 1000})
            for (int root = 0; root < comm.size(); ++root) {
              std::vector<std::int64_t> data(n);
              std::vector<std::int64_t> expected(n);
              for (std::size_t i = 0; i < n; ++i) {
                expected[i] = tagged<std::int64_t>(root, i);
                data[i] = comm.rank() == root ? expected[i] : -1;
              }
              // Segments of 64 bytes: a 1000-element message travels in 125 segments.
              algorithms::broadcast(comm, data, root, a.chosen, 64);
              EXPECT_TRUE(same_elements(data, expected))
                  << context(collective::broadcast, a, n, false, comm.rank()) << ", root " << root;
            }
      },
      rank_counts);
}

TYPED_TEST(collective_algorithms, reduce_delivers_at_every_root) {
  TypeParam::run(
      [](communicator auto& comm) {
        for (const choice a : algorithms_for(collective::reduce, comm.size()))
          for (const std::size_t n : {0, 1, 37, 1000})
            for (int root = 0; root < comm.size(); ++root)
              for (const op reduction : all_ops) {
                const auto data = contributions<std::int64_t>(reduction, comm.rank(), n);
                std::vector<std::int64_t> out(comm.rank() == root ? n : 0);
                // Segments of 64 bytes: a 1000-element message travels in 125 segments.
                algorithms::reduce(comm, data, out, reduction, root, a.chosen, 64);
                if (comm.rank() == root) {
                  EXPECT_TRUE(same_elements(out, serial_reduction<std::int64_t>(reduction, comm.size(), n)))
                      << context(collective::reduce, a, n, false, comm.rank()) << ", root " << root;
                }
              }
      },
      rank_counts);
}

// The barrier completes on every rank count and leaves no message behind (a later exchange on a tag
// of its own still matches), and its pattern spreads word from every rank to every rank: following
// who has heard from whom through its steps, everyone has heard from everyone at the end.
TYPED_TEST(collective_algorithms, barrier_hears_from_every_rank) {
  TypeParam::run(
      [](communicator auto& comm) {
        const int ranks = comm.size();
        algorithms::barrier(comm);
        const int right = (comm.rank() + 1) % ranks;
        const int left = (comm.rank() + ranks - 1) % ranks;
        const std::vector<int> sent{comm.rank()};
        auto sending = comm.isend(sent, right, 7);
        algorithms::barrier(comm, algorithm::dissemination);
        std::vector<int> received(1, -1);
        comm.recv(received, left, 7);
        sending.wait();
        EXPECT_EQ(received[0], left);

        const algorithms::pattern<std::size_t> steps{collective::barrier, algorithm::dissemination, ranks, 0};
        std::vector<std::vector<bool>> heard(static_cast<std::size_t>(ranks),
                                             std::vector<bool>(static_cast<std::size_t>(ranks)));
        for (int r = 0; r < ranks; ++r) heard[static_cast<std::size_t>(r)][static_cast<std::size_t>(r)] = true;
        for (int k = 0; k < steps.steps(); ++k) {
          auto before = heard;
          for (int r = 0; r < ranks; ++r) {
            const auto e = steps.exchange(r, k);
            ASSERT_EQ(steps.exchange(e.send_to, k).receive_from, r) << "step " << k << ", rank " << r;
            for (int s = 0; s < ranks; ++s)
              if (before[static_cast<std::size_t>(e.receive_from)][static_cast<std::size_t>(s)])
                heard[static_cast<std::size_t>(r)][static_cast<std::size_t>(s)] = true;
          }
        }
        for (int r = 0; r < ranks; ++r)
          for (int s = 0; s < ranks; ++s)
            EXPECT_TRUE(heard[static_cast<std::size_t>(r)][static_cast<std::size_t>(s)])
                << "rank " << r << " has not heard from rank " << s << " on " << ranks << " ranks";
      },
      rank_counts);
}

TYPED_TEST(collective_algorithms, misuse_throws_naming_the_call_the_rank_and_the_values) {
  TypeParam::run(
      [](communicator auto& comm) {
        std::vector<std::int64_t> in(6), out(6 * static_cast<std::size_t>(comm.size())), sums(6);
        // `call` throws an argument_error whose message, after "[rank N] ", is `message`.
        const auto expect_refusal = [&](const auto& call, const std::string& message) {
          try {
            call();
            FAIL() << "ran: " << message;
          } catch (const argument_error& e) {
            EXPECT_EQ(std::string(e.what()), "[rank " + std::to_string(comm.world_rank()) + "] " + message);
          }
        };
        expect_refusal([&] { algorithms::all_gather(comm, in, out, algorithm::recursive_doubling); },
                       "algorithms::all_gather(recursive doubling): recursive doubling is not an algorithm for "
                       "all_gather on 3 ranks");
        expect_refusal(
            [&] { algorithms::all_reduce(comm, in, sums, op::sum, algorithm::hierarchical, {.ranks_per_node = 2}); },
            "algorithms::all_reduce(hierarchical in nodes of 2, sum): hierarchical in nodes of 2 is not an algorithm "
            "for all_reduce on 3 ranks");
        EXPECT_THROW(algorithms::all_reduce(comm, in, out, op::sum, algorithm::ring), argument_error);
        EXPECT_THROW(algorithms::all_reduce(comm, in, in, op::sum, algorithm::pairwise), argument_error);
        EXPECT_THROW(algorithms::all_reduce(comm, in, sums, op::sum, algorithm::hierarchical, {.ranks_per_node = 0}),
                     argument_error);
        EXPECT_THROW(algorithms::all_gather(comm, in, out, algorithm::hierarchical), argument_error);
        expect_refusal([&] { algorithms::all_gather(comm, in, out, algorithm::ring, {}, 4); },
                       "algorithms::all_gather(ring in nodes of 1, in 4 channels): ring in nodes of 1, in 4 channels "
                       "is not an algorithm for all_gather on 3 ranks");
        expect_refusal([&] { algorithms::reduce_scatter(comm, out, in, op::sum, algorithm::ring, {2}, 4); },
                       "algorithms::reduce_scatter(ring in nodes of 2, in 4 channels, sum): ring in nodes of 2, in 4 "
                       "channels is not an algorithm for reduce_scatter on 3 ranks");
        EXPECT_THROW(algorithms::all_reduce(comm, in, sums, op::sum, algorithm::rabenseifner, {}, 2), argument_error);
        EXPECT_THROW(algorithms::all_reduce(comm, in, sums, op::sum, algorithm::hierarchical, {}, 3), argument_error);
        EXPECT_THROW(algorithms::broadcast(comm, in, comm.size(), algorithm::binomial), argument_error);
        expect_refusal([&] { algorithms::broadcast(comm, in, 0, algorithm::pipelined, 0); },
                       "algorithms::broadcast(pipelined, root 0): segments of 0.000000 bytes");
        expect_refusal([&] { algorithms::reduce(comm, in, sums, op::sum, 0, algorithm::pipelined, -1); },
                       "algorithms::reduce(pipelined, sum, root 0): segments of -1.000000 bytes");
        EXPECT_THROW(algorithms::reduce_scatter(comm, in, in, op::sum, algorithm::ring), argument_error);
        EXPECT_THROW(algorithms::barrier(comm, algorithm::automatic), argument_error);
      },
      {3});
}

}  // namespace
