#pragma once
// frobenius_norm(t): the Frobenius norm of the global matrix, on every rank. Collective over the mesh.
// Replicated blocks count once (the copy on the rank owner() names). A partial-sum tensor does not
// compile: the norm of the addends is not the norm of the sum.
#include <cmath>
#include <concepts>
#include <cstdint>
#include <span>

#include "shardwise/comm/reduction.hpp"
#include "shardwise/layout/partial_sum.hpp"
#include "shardwise/tensor/dtensor.hpp"

namespace shardwise {

template <std::floating_point T, class Layout, class Mesh>
[[nodiscard]] double frobenius_norm(const dtensor<T, Layout, Mesh>& tensor) {
  static_assert(!is_partial_sum_v<Layout>,
                "shardwise::frobenius_norm: the tensor holds partial sums (addends still to be summed over a mesh "
                "axis), and the norm of the addends is not the norm of the sum: call reduce(t) first");
  auto& world = tensor.mesh().world();
  double squares = 0;
  for (int b = 0; b < tensor.block_count(); ++b) {
    const block_info& info = tensor.block(b);
    if (info.elements() == 0 || tensor.mapping().owner(info.row_offset, info.col_offset).rank != world.rank()) continue;
    squares += tensor.local(b).template cast<double>().squaredNorm();
  }
  world.all_reduce(std::span<double>(&squares, 1), op::sum);
  return std::sqrt(squares);
}

}  // namespace shardwise
