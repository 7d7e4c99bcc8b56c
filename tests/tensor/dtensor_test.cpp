// dtensor on every backend: for every built-in layout on 1-D, 2-D and 3-D meshes of P ranks and global
// shapes that include 1, primes and shapes that do not divide the grid —
//   scatter then gather (and all_gather) gives back the matrix exactly, and each block holds the right
//   elements; from_function makes the same blocks without the whole matrix;
//   redistribute A -> B gives B's blocks, and back -> A is the identity, for every pair of layouts;
//   a partial sum reduces to the serial sum; transform, scale and the Frobenius norm match serial Eigen;
//   runtime misuse (an exact layout and a shape that does not divide, a diagonal on a non-square
//   plane, wrong blocks) throws on every rank, naming the rank, the shape, the grid and the rule;
//   so do shapes whose element count does not fit in 64 bits, negative extents, and (layout checks on
//   here, as in debug builds) a layout that breaks the layout contract.
// The round trips on 1-D and 3-D meshes compile in sources of their own (dtensor_1d_test.cpp,
// dtensor_3d_test.cpp), and the long list of layouts on 2-D meshes apart from its test here
// (dtensor_layouts_2d.cpp); what they share is in dtensor_checks.hpp.
#define SHARDWISE_CHECK_LAYOUTS 1
#include "tensor/dtensor_checks.hpp"

#include <gtest/gtest.h>

#include <Eigen/Core>
#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "shardwise/core/block_cache.hpp"
#include "shardwise/core/shared_buffer.hpp"
#include "shardwise/layout/block_cyclic_2d.hpp"
#include "shardwise/layout/layout.hpp"
#include "shardwise/layout/partial_sum.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/layout/vector_3d.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/mesh/shape.hpp"
#include "shardwise/tensor/distribute.hpp"
#include "shardwise/tensor/dtensor.hpp"
#include "shardwise/tensor/elementwise.hpp"
#include "shardwise/tensor/norm.hpp"
#include "shardwise/tensor/reduce.hpp"
#include "support/messages.hpp"
#include "support/test_layouts.hpp"

namespace {

using namespace shardwise;
using namespace shardwise::testing;

TYPED_TEST(dtensor_test, two_dimensional_round_trips) {
  TypeParam::run(
      [](communicator auto& world) {
        process_mesh mesh(world, balanced_shape<2>(world.size()));
        for (const auto& shape : shapes()) {
          check_layouts(mesh, shape,
                        layouts<block_2d<ragged>, block_2d<padded>, col_1d<ragged>, replicated<>, block_cyclic_2d<2, 3>,
                                split<rows_over<1, 0>, cols_over<>, padded>>{});
          check_layouts(mesh, divisible(shape, world.size()), layouts<block_2d<>, row_1d<padded>>{});
        }
      },
      rank_counts);
}

// The 3-D paper's local product before the reduce-scatter: C_il on (i, j, l) needs a sum over z. Here
// each rank's addend is value * (l + 1); the sum is value * p_z (p_z + 1) / 2.
TYPED_TEST(dtensor_test, partial_sums_reduce_to_the_serial_sum) {
  TypeParam::run(
      [](communicator auto& world) {
        process_mesh mesh(world, balanced_shape<3>(world.size()));
        using addends_layout = partial_sum<split<rows_over<0>, cols_over<1>, padded>, 2>;
        const int l = mesh.coords()[2];
        const int pz = mesh.shape()[2];
        for (const auto& shape : shapes()) {
          auto addends = from_function<addends_layout>(
              mesh, shape, [&](std::int64_t i, std::int64_t j) { return value(i, j) * (l + 1); });
          scale(addends, 2.0);  // linear: allowed before the reduction
          const auto sums = reduce(addends);
          const auto expected = from_function<split<rows_over<0>, cols_over<1>, padded>>(
              mesh, shape, [&](std::int64_t i, std::int64_t j) { return value(i, j) * pz * (pz + 1); });
          EXPECT_EQ(storage(sums), storage(expected));
        }
      },
      {1, 2, 4, 8, 27});
}

TYPED_TEST(dtensor_test, elementwise_and_norm_match_serial_eigen) {
  TypeParam::run(
      [](communicator auto& world) {
        process_mesh mesh(world, balanced_shape<2>(world.size()));
        for (const auto& shape : shapes()) {
          const matrix serial = whole(shape);
          const auto t = from_function<block_cyclic_2d<3, 2>>(mesh, shape, value);
          const auto r = from_function<row_1d<ragged>>(mesh, shape, value);  // replicated over axis 1
          const auto squared = transform(t, [](double v) { return v * v; });
          EXPECT_TRUE(all_gather(squared) == matrix(serial.array().square()));
          EXPECT_NEAR(frobenius_norm(t), serial.norm(), 1e-9 * serial.norm());
          EXPECT_NEAR(frobenius_norm(r), serial.norm(), 1e-9 * serial.norm());
        }
      },
      rank_counts);
}

TYPED_TEST(dtensor_test, from_blocks_takes_this_ranks_blocks) {
  TypeParam::run(
      [](communicator auto& world) {
        process_mesh mesh(world, balanced_shape<2>(world.size()));
        const matrix_extents shape{11, 9};
        const mapping_t<block_cyclic_2d<2>, 2> m(shape, mesh.shape());
        std::vector<matrix> blocks;
        for (int b = 0; b < m.block_count(world.rank()); ++b) {
          const block_info info = m.block(world.rank(), b);
          blocks.push_back(whole(shape).block(info.row_offset, info.col_offset, info.rows, info.cols));
        }
        EXPECT_TRUE(all_gather(from_blocks<block_cyclic_2d<2>>(mesh, shape, blocks)) == whole(shape));
        blocks.emplace_back(1, 1);
        EXPECT_EQ(message_of<argument_error>([&] { (void)from_blocks<block_cyclic_2d<2>>(mesh, shape, blocks); }),
                  "[rank " + std::to_string(world.world_rank()) + "] from_blocks<" + layout_name<block_cyclic_2d<2>>() +
                      ">(11x9, " + std::to_string(blocks.size()) + " blocks): the layout gives this rank " +
                      std::to_string(m.block_count(world.rank())) + " blocks, " + std::to_string(blocks.size()) +
                      " were given");
      },
      rank_counts);
}

// Every rank throws, naming itself, the shape, the grid and the rule.
TYPED_TEST(dtensor_test, shapes_an_exact_layout_cannot_cut_throw_on_every_rank) {
  TypeParam::run(
      [](communicator auto& world) {
        process_mesh mesh(world, {2, world.size() / 2});
        try {
          (void)from_function<block_2d<>>(mesh, {9, 4}, value);
          FAIL() << "9 rows over 2 parts were accepted";
        } catch (const argument_error& e) {
          EXPECT_EQ(e.rank(), world.world_rank());
          const std::string text = e.what();
          for (const std::string& part : {"[rank " + std::to_string(world.world_rank()) + "]", std::string("9 rows"),
                                          "grid " + shape_string(mesh.shape()), std::string("exact")})
            EXPECT_NE(text.find(part), std::string::npos) << "missing \"" << part << "\" in: " << text;
        }
        process_mesh cube(world, {1, 2, world.size() / 2});
        EXPECT_THROW((void)from_function<vector_3d<>>(cube, {1, 8}, value), mesh_error);
      },
      {2, 6, 8});
}

// Sizes that do not fit are refused before anything is allocated, on every rank, naming it.
TYPED_TEST(dtensor_test, shapes_whose_elements_do_not_fit_throw_on_every_rank) {
  TypeParam::run(
      [](communicator auto& world) {
        process_mesh mesh(world, balanced_shape<2>(world.size()));
        const std::string rank = "[rank " + std::to_string(world.world_rank()) + "] dtensor: ";
        const std::int64_t two_to_the_40 = std::int64_t{1} << 40;
        EXPECT_EQ(message_of<argument_error>([&] {
                    (void)dtensor<float, replicated<>, decltype(mesh)>(mesh, {two_to_the_40, two_to_the_40});
                  }),
                  rank + "a 1099511627776x1099511627776 matrix has more elements than fit in 64 bits");
        EXPECT_EQ(message_of<argument_error>(
                      [&] { (void)from_function<block_2d<ragged>>(mesh, {std::int64_t{1} << 62, 4}, value); }),
                  "[rank " + std::to_string(world.world_rank()) +
                      "] from_function<block_2d<ragged>>(4611686018427387904x4): dtensor: a 4611686018427387904x4 "
                      "matrix has more elements than fit in 64 bits");
        EXPECT_EQ(message_of<argument_error>(
                      [&] { (void)dtensor<double, block_cyclic_2d<2>, decltype(mesh)>(mesh, {5, -7}); }),
                  rank + "a matrix cannot have -7 columns");
      },
      {1, 4, 6});
}

// A layout that breaks the contract is refused on every rank, naming the rank, the element and the
// blocks: rank 2 holding rank 1's columns; rank 0 storing more elements than 64 bits count.
TYPED_TEST(dtensor_test, a_layout_that_breaks_the_contract_is_refused) {
  TypeParam::run(
      [](communicator auto& world) {
        using shardwise::testing::breach;
        using shardwise::testing::test_layout;
        process_mesh mesh(world, {world.size()});
        const std::string rank = "[rank " + std::to_string(world.world_rank()) + "] check_layout: ";
        using columns_held_twice = test_layout<breach::shared_block>;
        EXPECT_EQ(message_of<layout_error>([&] { (void)from_function<columns_held_twice>(mesh, {10, 7}, value); }),
                  "[rank " + std::to_string(world.world_rank()) + "] from_function<" +
                      layout_name<columns_held_twice>() +
                      ">(10x7): check_layout: element (0, 2) is held by rank 1 block 0 and rank 2 block 0, and the "
                      "layout does not declare replication (a 10x7 matrix on 4 ranks)");
        using huge_storage = test_layout<breach::stored_too_much>;
        EXPECT_EQ(message_of<layout_error>([&] { (void)dtensor<float, huge_storage, decltype(mesh)>(mesh, {3, 8}); }),
                  rank +
                      "rank 0 block 0 stores 1099511627776x1099511627776 elements, more than fit in 64 bits (a "
                      "3x8 matrix on 4 ranks)");
      },
      {4});
}

// A tensor bound to a shared buffer keeps its elements there: copies are its own, assignments write
// into the buffer, and a buffer of another size is refused.
TYPED_TEST(dtensor_test, bound_storage_lives_in_the_buffer) {
  TypeParam::run(
      [](communicator auto& world) {
        process_mesh mesh(world, {world.size()});
        auto tensor = from_function<row_1d<padded>>(mesh, {3, 7}, value);
        const std::size_t stored = tensor.data().size();
        auto buffer = shared_buffer<double>::zeros(stored + 4);
        tensor.bind(buffer.view(2, stored));
        EXPECT_TRUE(tensor.is_bound());
        EXPECT_EQ(tensor.data().data(), buffer.data() + 2);
        EXPECT_EQ(all_gather(tensor), all_gather(from_function<row_1d<padded>>(mesh, {3, 7}, value)));

        auto copy = tensor;
        EXPECT_FALSE(copy.is_bound());
        EXPECT_NE(copy.data().data(), tensor.data().data());
        copy.local() *= 3;
        tensor = copy;  // into the buffer
        EXPECT_EQ(tensor.data().data(), buffer.data() + 2);
        EXPECT_EQ(all_gather(tensor), all_gather(copy));
        tensor = from_function<row_1d<padded>>(mesh, {3, 7}, [](std::int64_t, std::int64_t) { return 1.0; });
        EXPECT_EQ(tensor.data().data(), buffer.data() + 2);
        EXPECT_EQ(buffer.data()[0], 0.0);
        EXPECT_EQ(buffer.data()[stored + 2], 0.0);

        EXPECT_THROW(tensor = (from_function<row_1d<padded>>(mesh, {4, 7}, value)), argument_error);
        auto other = from_function<row_1d<padded>>(mesh, {3, 7}, value);
        EXPECT_THROW(other.bind(buffer.view(0, stored + 1)), argument_error);
      },
      {1, 2, 3});
}

// The memory of a freed buffer is kept by the thread that frees it for the next buffer of the same
// size, zeroed again; a thread keeps no more than it once had in use at the same time (on a thread of
// its own, so the counts start at zero).
TEST(shared_buffer, freed_memory_is_reused_for_a_buffer_of_its_size) {
  if (!block_cache::keeps_blocks) GTEST_SKIP() << "blocks go back to the sanitizer's allocator";
  std::thread([] {
    const double* first = nullptr;
    {
      const auto a = shared_buffer<double>::zeros(1000);
      a.span()[5] = 7;
      first = a.data();
    }
    EXPECT_EQ(block_cache::cached_bytes(), 8000u);
    auto b = shared_buffer<double>::zeros(1000);
    EXPECT_EQ(b.data(), first) << "the freed block, reused";
    EXPECT_EQ(b.span()[5], 0.0) << "zeroed again";
    EXPECT_EQ(block_cache::cached_bytes(), 0u);
    {
      const auto c = shared_buffer<double>::zeros(10);
    }  // 8080 bytes in use at once
    b = {};
    EXPECT_EQ(block_cache::cached_bytes(), 8080u);
    auto d = shared_buffer<double>::zeros(2000);  // not cached: a new block, 16000 in use
    d = {};
    EXPECT_EQ(block_cache::cached_bytes(), 8080u) << "8080 + 16000 is more than was ever in use at once";
  }).join();
}

}  // namespace
