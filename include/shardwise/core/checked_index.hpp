#pragma once
// An element of a sequence by a number the user gave (a peer, a table, a stream): the element, or an
// argument_error naming the call, the rank and the number, where std::vector::at would throw
// std::out_of_range saying only "vector::_M_range_check" and two numbers.
//
//   const auto& piece = element_at(tables_, table, world_rank, "optim::sparse_update::name", "table");
//   // "[rank 2] optim::sparse_update::name: table 7 is out of range: there are 3, numbered from 0"
#include <concepts>
#include <cstddef>
#include <ranges>
#include <string>
#include <string_view>
#include <utility>

#include "shardwise/core/error.hpp"

namespace shardwise {

template <std::ranges::random_access_range Sequence, std::integral Index>
[[nodiscard]] decltype(auto) element_at(Sequence&& sequence, Index index, int world_rank, std::string_view call,
                                        std::string_view what) {
  const auto count = std::ranges::size(sequence);
  if (std::cmp_less(index, 0) || std::cmp_greater_equal(index, count))
    throw argument_error(world_rank, call,
                         std::string(what) + " " + std::to_string(index) + " is out of range: there are " +
                             std::to_string(count) + ", numbered from 0");
  return std::ranges::begin(sequence)[static_cast<std::ptrdiff_t>(index)];
}

}  // namespace shardwise
