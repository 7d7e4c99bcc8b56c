#pragma once
// The blocks of a layout mapping as lazy ranges (range-v3 views), so code that walks them says what it
// asks instead of spelling out index loops:
//
//   blocks_of(mapping, rank)   rank's blocks, in block order: block_info
//   all_blocks(mapping)        every rank's blocks, rank by rank: placed_block {rank, index, block}
//
//   ranges::all_of(all_blocks(to), [&](const placed_block& p) { ... })
//   ranges::equal(blocks_of(mapping, r), blocks_of(mapping, s))
//
// The views refer to `mapping`, which must outlive them. range-v3, not C++20's std::views: clang 14
// with libstdc++ 12 (Debian 12's pair, clang-tidy's too) compiles not even `std::views::iota(0, n) |
// std::views::transform(f)`. (GCC 12 compiles these views in std::views, joining ranges made on the fly.)
#include <range/v3/view/for_each.hpp>
#include <range/v3/view/iota.hpp>
#include <range/v3/view/transform.hpp>

#include "shardwise/layout/layout.hpp"

namespace shardwise {

// One block of a mapping, with the rank that holds it and its index among that rank's blocks.
struct placed_block {
  int rank = 0;
  int index = 0;
  block_info block;
  friend bool operator==(const placed_block&, const placed_block&) = default;
};

template <layout_mapping M>
[[nodiscard]] auto blocks_of(const M& mapping, int rank) {
  return ranges::views::iota(0, mapping.block_count(rank)) |
         ranges::views::transform([&mapping, rank](int b) { return mapping.block(rank, b); });
}

template <layout_mapping M>
[[nodiscard]] auto all_blocks(const M& mapping) {
  return ranges::views::iota(0, mapping.ranks()) | ranges::views::for_each([&mapping](int rank) {
           return ranges::views::iota(0, mapping.block_count(rank)) | ranges::views::transform([&mapping, rank](int b) {
                    return placed_block{rank, b, mapping.block(rank, b)};
                  });
         });
}

}  // namespace shardwise
