#pragma once
// How errors name a distributed tensor among a call's arguments: its layout and global shape,
// "cube_3d<>::input 64x32" (layout/layout_name.hpp).
#include <string>

#include "shardwise/layout/layout_name.hpp"
#include "shardwise/tensor/dtensor.hpp"

namespace shardwise {

template <class T, class Layout, class Mesh>
[[nodiscard]] std::string describe(const dtensor<T, Layout, Mesh>& tensor) {
  return layout_name<Layout>() + " " + extents_string(tensor.extents());
}

// This rank's number in the world of the run, for errors raised in `tensor`'s calls.
template <class T, class Layout, class Mesh>
[[nodiscard]] int world_rank_of(const dtensor<T, Layout, Mesh>& tensor) {
  return tensor.mesh().world().world_rank();
}

}  // namespace shardwise
