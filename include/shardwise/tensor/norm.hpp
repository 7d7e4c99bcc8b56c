#pragma once
// frobenius_norm(t): the Frobenius norm of the global matrix, on every rank. Collective over the mesh.
// Replicated blocks count once (the copy on the rank owner() names). A partial-sum tensor does not
// compile (a deleted overload, so the first error names the layout): the norm of the addends is not
// the norm of the sum. Its local part is one kernel: two operations an element, each read once.
#include <cmath>
#include <concepts>
#include <cstdint>
#include <span>

#include "shardwise/comm/reduction.hpp"
#include "shardwise/core/element.hpp"
#include "shardwise/core/kernel.hpp"
#include "shardwise/core/work.hpp"
#include "shardwise/layout/partial_sum.hpp"
#include "shardwise/tensor/dtensor.hpp"

namespace shardwise {

template <value_element T, class Layout, class Mesh>
[[nodiscard]] double frobenius_norm(const dtensor<T, Layout, Mesh>& tensor) {
  auto& world = tensor.mesh().world();
  const auto counted = [&](int b) {
    const block_info& info = tensor.block(b);
    return info.elements() != 0 && tensor.mapping().owner(info.row_offset, info.col_offset).rank == world.rank();
  };
  double squares = 0;
  run_kernel(
      world,
      [&] {
        double elements = 0;
        for (int b = 0; b < tensor.block_count(); ++b)
          if (counted(b)) elements += static_cast<double>(tensor.local(b).size());
        return work{2 * elements, sizeof(T) * elements};
      },
      "frobenius norm",
      [&] {
        for (int b = 0; b < tensor.block_count(); ++b)
          if (counted(b)) squares += tensor.local(b).template cast<double>().squaredNorm();
      });
  world.all_reduce(std::span<double>(&squares, 1), op::sum);
  return std::sqrt(squares);
}

template <value_element T, class Layout, class Mesh>
requires is_partial_sum_v<Layout>
double frobenius_norm(const dtensor<T, Layout, Mesh>&) = delete;  // the norm of addends is not the norm of the sum

}  // namespace shardwise
