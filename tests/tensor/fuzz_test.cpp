// Differential fuzzing of layouts, tensors and products against serial Eigen. Each case draws, from a
// seed, a mesh (1-27 ranks as threads, each case its own count; the world's size under MPI) of 1, 2 or
// 3 dimensions, a global shape of some kind (1xN, Nx1, primes, fewer elements than ranks, empty,
// divisible by the rank count, any), two layouts among those that accept the shape on that grid (the
// built-in ones under every padding rule, and a layout written here against the concept alone), and
// a product form its mesh supports. Then, on every rank:
//   scatter from a random root, and the tensor equals the serial matrix (owned elements exact,
//   padding zero); gather to another random root gives the matrix back;
//   redistribute to the second layout equals the serial matrix;
//   the product (ops/matmul.hpp) of operands in the form's layouts equals the serial Eigen product
//   within 1e-12 of its largest entry (partial sums reduced), with any number of chunks;
//   check_layout passes for every layout the case built.
// A failure names the seed and the case (SCOPED_TRACE), and a failing case runs alone with
//   SHARDWISE_FUZZ_SEED=<seed> SHARDWISE_FUZZ_FIRST=<case> SHARDWISE_FUZZ_CASES=1
// SHARDWISE_FUZZ_CASES sets how many cases run (default: 3000 on threads, 1500 on 4 MPI ranks, 800 on
// 8, some 30 s in all); scripts/fuzz runs a longer campaign with fresh seeds. The counts of what was
// drawn are printed. The cases (fuzz_cases.hpp) compile in sources of their own: each mesh dimension's
// layouts, and its products.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <string>

#include "support/backends.hpp"
#include "tensor/fuzz_cases.hpp"

namespace {

using namespace shardwise;
using namespace shardwise::testing::fuzz;

// Case `index` of the campaign `seed`: the same on every rank. `ranks` > 0 fixes the rank count (MPI).
fuzz_case draw_case(std::uint64_t seed, std::int64_t index, int ranks) {
  generator g(seed, index);
  fuzz_case c;
  c.index = index;
  c.ranks = ranks > 0 ? ranks : static_cast<int>(g.between(1, 27));
  c.dimensions = static_cast<std::size_t>(g.between(1, 3));
  if (c.dimensions == 1) draw_on<1>(g, c);
  if (c.dimensions == 2) draw_on<2>(g, c);
  if (c.dimensions == 3) draw_on<3>(g, c);
  return c;
}

// ---- the campaign

std::int64_t from_environment(const char* name, std::int64_t otherwise) {
  const char* text = std::getenv(name);
  return text != nullptr && *text != '\0' ? std::stoll(text) : otherwise;
}

// Under MPI every case runs on the whole world, and rank 0 reports; on threads each case draws its
// own rank count.
struct campaign_world {
  int fixed_ranks = 0;
  bool reports = true;
};
campaign_world this_world() {
#ifdef SHARDWISE_TEST_MPI
  const auto world = mpi::communicator::world();
  return {world.size(), world.rank() == 0};
#else
  return {};
#endif
}

template <class Backend>
class layout_fuzz : public ::testing::Test {};
TYPED_TEST_SUITE(layout_fuzz, shardwise::testing::backends);

TYPED_TEST(layout_fuzz, distributed_results_equal_serial_eigen) {
  const campaign_world here = this_world();
  const auto seed = static_cast<std::uint64_t>(from_environment("SHARDWISE_FUZZ_SEED", 20261122));
  const std::int64_t first = from_environment("SHARDWISE_FUZZ_FIRST", 0);
  const std::int64_t cases = from_environment("SHARDWISE_FUZZ_CASES", here.fixed_ranks == 0   ? 3000
                                                                      : here.fixed_ranks <= 4 ? 1500
                                                                                              : 800);
  const std::string reproduce = "SHARDWISE_FUZZ_SEED=" + std::to_string(seed) + " SHARDWISE_FUZZ_FIRST=";

  std::map<std::string, std::int64_t> drawn;
  for (std::int64_t index = first; index < first + cases; ++index) {
    const fuzz_case c = draw_case(seed, index, here.fixed_ranks);
    const std::string trace = reproduce + std::to_string(index) + " SHARDWISE_FUZZ_CASES=1 reruns " + c.description;
    try {
      const auto body = [&](communicator auto& world) {
        SCOPED_TRACE(trace);  // on each rank's thread: GoogleTest keeps traces per thread
        if (c.dimensions == 1) run_case<1>(world, c);
        if (c.dimensions == 2) run_case<2>(world, c);
        if (c.dimensions == 3) run_case<3>(world, c);
      };
      // Under MPI the cases take the world's size, one of the two CTest launches.
      if (here.fixed_ranks == 0) TypeParam::run(body, {c.ranks});
      else
        TypeParam::run(body, {4, 8});
    } catch (const std::exception& e) {
      ADD_FAILURE() << "the case threw: " << e.what() << "\n" << trace;
    }
    ++drawn[std::string("shape ") + kind_names[static_cast<std::size_t>(c.kind)]];
    ++drawn[std::to_string(c.dimensions) + "-D mesh"];
    ++drawn[c.ranks == 1 ? "1 rank" : c.ranks <= 8 ? "2-8 ranks" : "9-27 ranks"];
    if (c.user_layout) ++drawn["the user-written layout"];
    drawn["layouts that refused the shape on the grid"] += c.refused_layouts;
    ++drawn[c.product < 0 ? std::string("no product fits") : std::to_string(c.dimensions) + "-D products"];
    // Threads stop at the first failing case (its trace names it); MPI ranks go on together, since one
    // that stopped alone would leave the others waiting in the next case's collectives.
    if (here.fixed_ranks == 0 && ::testing::Test::HasFailure()) break;
  }
  if (!here.reports) return;
  std::string summary = "layout_fuzz: " + std::to_string(cases) + " cases of seed " + std::to_string(seed) + ":";
  for (const auto& [what, count] : drawn) summary += " " + what + " " + std::to_string(count) + ";";
  std::printf("%s\n", summary.c_str());
}

}  // namespace
