// Every backend counts each rank's element memory (core/element_memory.hpp): a dtensor's block while
// it lives, summed over the ranks the serial matrix's bytes; a replicated copy beside it, and the
// high-water mark kept after both are gone; and a buffer handed out of the run gives its bytes back,
// after the run, to the accounting it was counted in. largest_memory_high_water is the largest of the
// ranks' marks. A reused_buffer is working memory at its largest size, one block at a time.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "shardwise/comm/memory_high_water.hpp"
#include "shardwise/comm/reduction.hpp"
#include "shardwise/core/element_memory.hpp"
#include "shardwise/core/huge_pages.hpp"
#include "shardwise/core/reused_buffer.hpp"
#include "shardwise/core/shared_buffer.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/tensor/distribute.hpp"
#include "shardwise/tensor/dtensor.hpp"
#include "tensor/dtensor_checks.hpp"

namespace {

using namespace shardwise;
using namespace shardwise::testing;

constexpr std::initializer_list<int> memory_rank_counts = {1, 4, 8, 9};

TYPED_TEST(dtensor_test, each_rank_counts_the_blocks_it_holds) {
  TypeParam::run(
      [](communicator auto& world) {
        const element_memory* memory = element_memory::of_this_thread();
        ASSERT_NE(memory, nullptr) << "rank " << world.rank() << " has no element memory counted";
        process_mesh mesh(world, {world.size()});
        const std::int64_t before = memory->bytes_held();
        std::int64_t peak = 0;
        {
          const matrix_extents shape{37, 5};  // 37 rows over up to 9 ranks: blocks of different sizes
          const dtensor<double, col_1d<ragged>, decltype(mesh)> rows(mesh, shape);
          std::int64_t held = memory->bytes_held() - before;
          EXPECT_EQ(held, static_cast<std::int64_t>(rows.data().size_bytes())) << "rank " << world.rank();
          world.all_reduce(std::span<std::int64_t>(&held, 1), op::sum);
          EXPECT_EQ(held, shape.rows * shape.cols * static_cast<std::int64_t>(sizeof(double)));

          // Every row gathered onto every rank: the whole matrix held beside the rank's block.
          const auto everywhere = redistribute<replicated<>>(rows);
          peak = memory->bytes_held();
          EXPECT_EQ(peak - before,
                    static_cast<std::int64_t>(rows.data().size_bytes() + everywhere.data().size_bytes()));
        }
        EXPECT_EQ(memory->bytes_held(), before) << "rank " << world.rank() << " kept bytes of tensors it no longer has";
        EXPECT_GE(memory->high_water(), peak) << "rank " << world.rank() << " lost its high-water mark";
      },
      memory_rank_counts);
}

TYPED_TEST(dtensor_test, the_largest_high_water_mark_is_the_largest_ranks) {
  TypeParam::run(
      [](communicator auto& world) {
        // Rank r holds (r + 1) kibibytes more than the others at its peak, so the ranks' marks differ.
        {
          const auto held = shared_buffer<std::byte>::zeros(static_cast<std::size_t>(world.rank() + 1) << 10);
        }
        const std::int64_t mine = element_memory::of_this_thread()->high_water();
        std::vector<std::int64_t> marks(static_cast<std::size_t>(world.size()));
        world.all_gather(std::span<const std::int64_t>(&mine, 1), std::span<std::int64_t>(marks));
        EXPECT_EQ(largest_memory_high_water(world), *std::max_element(marks.begin(), marks.end()))
            << "rank " << world.rank();
      },
      memory_rank_counts);
}

TYPED_TEST(dtensor_test, a_buffer_handed_out_of_the_run_gives_its_bytes_back_after_it) {
  // A slot a rank; under MPI only this process's rank fills its own.
  constexpr int ranks = 4;
  std::vector<std::shared_ptr<element_memory>> accounts(ranks);
  std::vector<shared_buffer<double>> kept(ranks);
  TypeParam::run(
      [&](communicator auto& world) {
        const auto r = static_cast<std::size_t>(world.rank());
        accounts[r] = element_memory::shared_of_this_thread();
        kept[r] = shared_buffer<double>::zeros(100 + r);
      },
      {ranks});
  for (std::size_t r = 0; r < ranks; ++r) {
    if (accounts[r] == nullptr) continue;
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_EQ(accounts[r]->bytes_held(), static_cast<std::int64_t>((100 + r) * sizeof(double)));
    kept[r] = {};  // after the run: the accounting is still there to take the bytes back
    EXPECT_EQ(accounts[r]->bytes_held(), 0);
  }
}

TYPED_TEST(dtensor_test, a_reused_buffer_counts_its_largest_size_as_working_memory) {
  TypeParam::run(
      [](communicator auto& world) {
        const element_memory* memory = element_memory::of_this_thread();
        ASSERT_NE(memory, nullptr) << "rank " << world.rank() << " has no element memory counted";
        const auto r = static_cast<std::size_t>(world.rank());
        const std::int64_t before = memory->working_bytes_held();
        const auto bytes = [](std::size_t elements) { return static_cast<std::int64_t>(elements * sizeof(double)); };
        {
          reused_buffer<double> buffer;
          const std::span<double> first = buffer.take(100 + r);
          EXPECT_EQ(first.size(), 100 + r);
          EXPECT_EQ(reinterpret_cast<std::uintptr_t>(first.data()) % shared_buffer<double>::alignment, 0U);
          EXPECT_EQ(memory->working_bytes_held() - before, bytes(100 + r)) << "rank " << r;

          const std::span<double> smaller = buffer.take(50);  // the same memory, nothing counted again
          EXPECT_EQ(smaller.data(), first.data()) << "rank " << r;
          EXPECT_EQ(memory->working_bytes_held() - before, bytes(100 + r)) << "rank " << r;

          // Larger than a huge page: the old block is given back before the new one is counted.
          const std::size_t large = huge_page_bytes / sizeof(double) + r;
          const std::int64_t high_water = memory->high_water();
          const std::int64_t held = memory->bytes_held() + memory->working_bytes_held();
          const std::span<double> grown = buffer.take(large);
          EXPECT_EQ(grown.size(), large);
          EXPECT_EQ(reinterpret_cast<std::uintptr_t>(grown.data()) % huge_page_bytes, 0U) << "rank " << r;
          EXPECT_EQ(memory->working_bytes_held() - before, bytes(large)) << "rank " << r;
          EXPECT_EQ(memory->high_water(), std::max(high_water, held - bytes(100 + r) + bytes(large)))
              << "rank " << r << " held the old block and the new one at once";
          std::fill(grown.begin(), grown.end(), 1.0);  // its memory is the rank's to write
        }
        EXPECT_EQ(memory->working_bytes_held(), before) << "rank " << r << " kept the bytes of a buffer it let go";
      },
      memory_rank_counts);
}

}  // namespace
