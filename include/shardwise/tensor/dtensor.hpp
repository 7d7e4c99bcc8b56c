#pragma once
// dtensor<T, Layout, Mesh>: one rank's share of a global matrix distributed over a process_mesh by a
// layout (layout/layout.hpp). It owns the rank's blocks in one buffer, exposes each as an Eigen::Map,
// and knows the global shape. Higher-rank tensors are matrices through flatten().
//
//   process_mesh mesh(world, {2, 2, 2});
//   auto a = from_function<cube_3d<>::input>(mesh, {96, 64}, [](auto i, auto j) { return float(i + j); });
//   a.local() *= 2;                                     // this rank's block, as Eigen
//   auto b = redistribute<row_1d<ragged>>(a);           // tensor/distribute.hpp
//
// Made by: the constructor (zeros), from_function (global index -> value, never materialising the
// whole matrix), from_blocks (this rank's blocks), scatter (a whole matrix on one rank). Read back by
// gather / all_gather (tensor/distribute.hpp).
//
// Construction refuses, naming the rank, a shape with a negative extent or more elements than fit in
// 64 bits, and a rank whose blocks store more; with SHARDWISE_CHECK_LAYOUTS (by default in builds
// without NDEBUG) it also checks the layout against the layout contract (layout/check_layout.hpp).
//
// The tensor borrows its mesh, which must outlive it. Padding (layout/padding.hpp) is stored after the
// owned part of each block, held at zero; local(b) shows only the owned part.
//
// Storage is the tensor's own, or, after bind(buffer), a view of a larger buffer (a training update's
// flat weights or gradients, core/shared_buffer.hpp). A bound tensor stays bound: assigning to it
// copies the elements into the buffer, so a layer that writes `parameter.gradient = ...` writes where
// the update reads. Copying any tensor copies its elements.
#include <Eigen/Core>
#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "shardwise/core/bf16_eigen.hpp"
#include "shardwise/core/checked_arithmetic.hpp"
#include "shardwise/core/element.hpp"
#include "shardwise/core/element_memory.hpp"
#include "shardwise/core/error.hpp"
#include "shardwise/core/kernel.hpp"
#include "shardwise/core/shared_buffer.hpp"
#include "shardwise/layout/check_layout.hpp"
#include "shardwise/layout/layout.hpp"
#include "shardwise/layout/layout_name.hpp"
#include "shardwise/layout/partial_sum.hpp"

namespace shardwise {

namespace detail {

// Runs f(); an error it raises without a rank (a mapping's, check_layout's) names `world_rank`.
template <class F>
decltype(auto) naming_rank(int world_rank, F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (error& raised) {
    raised.on_rank(world_rank);
    throw;
  }
}

// Builds a layout's mapping, after checking that the shape's element count fits in 64 bits; with
// SHARDWISE_CHECK_LAYOUTS (by default without NDEBUG), checks the mapping against the layout contract
// (layout/check_layout.hpp) once per layout, shape and grid.
template <class Layout, std::size_t D>
mapping_t<Layout, D> make_mapping(const matrix_extents& extents, const coordinates<D>& grid, int world_rank) {
  (void)matrix_elements(extents, world_rank, "dtensor");
  return naming_rank(world_rank, [&] {
    mapping_t<Layout, D> mapping(extents, grid);
    if constexpr (SHARDWISE_CHECK_LAYOUTS != 0) check_layout_once<Layout>(mapping, grid);
    return mapping;
  });
}

struct summed_in_place;

}  // namespace detail

template <class T, class Layout, class Mesh>
class dtensor {
  static_assert(communicable<T>,
                "shardwise::dtensor: elements travel between ranks as bytes, so T must be trivially copyable");
  static_assert(
      requires {
        Mesh::dimensions;
        typename Mesh::communicator_type;
      }, "shardwise::dtensor: the third argument must be a shardwise::process_mesh");
  static_assert(layout<Layout, Mesh::dimensions>,
                "shardwise::dtensor: Layout does not model shardwise::layout for a mesh of this many dimensions "
                "(a policy with a nested mapping<D>; see layout/layout.hpp)");

 public:
  using value_type = T;
  using layout_type = Layout;
  using mesh_type = Mesh;
  static constexpr std::size_t dimensions = Mesh::dimensions;
  using mapping_type = mapping_t<Layout, dimensions>;
  using matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using block_map = Eigen::Map<matrix, Eigen::Unaligned, Eigen::OuterStride<>>;
  using const_block_map = Eigen::Map<const matrix, Eigen::Unaligned, Eigen::OuterStride<>>;
  // The blocks are addends of a sum still to be taken over some mesh axes (layout/partial_sum.hpp).
  static constexpr bool is_partial_sum = is_partial_sum_v<Layout>;

  // A tensor of `extents` whose blocks are zero. Throws (naming this rank) when the layout cannot cut
  // the shape over the mesh, e.g. an exact layout and a shape that does not divide.
  dtensor(Mesh& mesh, matrix_extents extents)
      : mesh_(&mesh),
        mapping_(detail::make_mapping<Layout, dimensions>(extents, mesh.shape(), mesh.world().world_rank())),
        rank_(mesh.world().rank()) {
    const int world_rank = mesh.world().world_rank();
    const std::vector<std::int64_t> starts = detail::naming_rank(world_rank, [&] {
      for (int b = 0; b < mapping_.block_count(rank_); ++b) blocks_.push_back(mapping_.block(rank_, b));
      return block_starts(mapping_, rank_);
    });
    for (std::size_t b = 0; b < blocks_.size(); ++b) offsets_.push_back(static_cast<std::size_t>(starts[b]));
    const auto too_many_bytes = [&] {
      return "this rank's blocks of a " + extents_string(extents) + " matrix store " + std::to_string(starts.back()) +
             " elements of " + std::to_string(sizeof(T)) + " bytes, more bytes than fit in 64 bits";
    };
    (void)require_fits(product_if_fits(starts.back(), std::int64_t{sizeof(T)}), world_rank, "dtensor", too_many_bytes);
    storage_ = shared_buffer<T>::zeros(static_cast<std::size_t>(starts.back()));
  }

  // Layouts never convert implicitly. Deleted rather than a static_assert, so that the compiler's first
  // error names both layouts ("use of deleted function ... [with OtherLayout = ...; Layout = ...]") and
  // its excerpt of this line shows why.
  template <class OtherLayout>
  requires(!std::same_as<OtherLayout, Layout>)
  dtensor(const dtensor<T, OtherLayout, Mesh>&) = delete;  // layouts never convert: redistribute<L>(t) or reduce(t)

  dtensor(const dtensor& other)
      : mesh_(other.mesh_),
        mapping_(other.mapping_),
        rank_(other.rank_),
        blocks_(other.blocks_),
        offsets_(other.offsets_),
        storage_(shared_buffer<T>::zeros(other.data().size())) {
    copy_elements_priced(other.data(), storage_.data(), "dtensor");
  }
  dtensor(dtensor&&) noexcept = default;
  dtensor& operator=(const dtensor& other) {
    if (this != &other) assign(other, "dtensor::operator=");
    return *this;
  }
  // Not noexcept: a tensor bound to an update's buffer keeps that buffer, so moving into it copies, and
  // throws when the shapes differ.
  dtensor& operator=(dtensor&& other) {  // NOLINT(performance-noexcept-move-constructor)
    if (bound_) {
      assign(other, "dtensor::operator=");
    } else {
      mesh_ = other.mesh_;
      mapping_ = std::move(other.mapping_);
      rank_ = other.rank_;
      blocks_ = std::move(other.blocks_);
      offsets_ = std::move(other.offsets_);
      storage_ = std::move(other.storage_);
      bound_ = other.bound_;
    }
    return *this;
  }
  ~dtensor() = default;

  // From now on this tensor's elements live in `buffer` (as many elements as this rank's blocks store,
  // padding included), which takes their current values (none after release()). Throws argument_error
  // when the sizes differ.
  void bind(shared_buffer<T> buffer) {
    const auto elements = static_cast<std::size_t>(stored_elements(mapping_, rank_));
    if (buffer.size() != elements)
      throw argument_error(mesh_->world().world_rank(), "dtensor::bind",
                           "the tensor stores " + std::to_string(elements) + " elements on this rank, the buffer has " +
                               std::to_string(buffer.size()));
    copy_elements_priced(data(), buffer.data(), "dtensor::bind");
    storage_ = std::move(buffer);
    bound_ = true;
  }
  // Gives the elements' memory back, for a caller about to allocate the buffer this tensor will be
  // bound to, who needs that memory first (an update taking over a model's zero gradients): until
  // bind(), the tensor has no elements and bind() keeps the buffer's values.
  void release() { storage_ = shared_buffer<T>{}; }
  // Whether the elements live in a buffer given to bind().
  [[nodiscard]] bool is_bound() const noexcept { return bound_; }

  [[nodiscard]] Mesh& mesh() const noexcept { return *mesh_; }
  [[nodiscard]] const mapping_type& mapping() const noexcept { return mapping_; }
  [[nodiscard]] matrix_extents extents() const noexcept { return mapping_.extents(); }
  [[nodiscard]] std::int64_t rows() const noexcept { return mapping_.extents().rows; }
  [[nodiscard]] std::int64_t cols() const noexcept { return mapping_.extents().cols; }

  // This rank's blocks: how many, where each lies in the global matrix, and each as an Eigen matrix.
  [[nodiscard]] int block_count() const noexcept { return static_cast<int>(blocks_.size()); }
  [[nodiscard]] const block_info& block(int b = 0) const { return blocks_[checked(b, "dtensor::block")]; }
  [[nodiscard]] block_map local(int b = 0) {
    const block_info& info = blocks_[checked(b, "dtensor::local")];
    return block_map(storage_.data() + offsets_[static_cast<std::size_t>(b)], info.rows, info.cols,
                     Eigen::OuterStride<>(info.stored_cols));
  }
  [[nodiscard]] const_block_map local(int b = 0) const {
    const block_info& info = blocks_[checked(b, "dtensor::local")];
    return const_block_map(storage_.data() + offsets_[static_cast<std::size_t>(b)], info.rows, info.cols,
                           Eigen::OuterStride<>(info.stored_cols));
  }

  // Every block's storage (padding included), back to back in block order, each row-major with its
  // stored extents: what collectives send.
  [[nodiscard]] std::span<T> data() noexcept { return storage_.span(); }
  [[nodiscard]] std::span<const T> data() const noexcept { return storage_.span(); }

 private:
  template <class, class, class>
  friend class dtensor;
  friend struct detail::summed_in_place;

  // The blocks and storage of `addends`, a partial sum of this layout that has just been summed in that
  // storage: the same elements, now final.
  template <class Partial>
  explicit dtensor(dtensor<T, Partial, Mesh>&& addends)
      : mesh_(addends.mesh_),
        mapping_(std::move(addends.mapping_)),
        rank_(addends.rank_),
        blocks_(std::move(addends.blocks_)),
        offsets_(std::move(addends.offsets_)),
        storage_(std::move(addends.storage_)) {
    static_assert(std::is_same_v<typename Partial::final_layout, Layout> &&
                  std::is_same_v<typename dtensor<T, Partial, Mesh>::mapping_type, mapping_type>);
  }

  // Copies `other` into this tensor: into the same storage when bound (same shape required), else into
  // a fresh copy.
  void assign(const dtensor& other, const char* operation) {
    if (!bound_) {
      *this = dtensor(other);
      return;
    }
    if (other.extents() != extents() || other.data().size() != storage_.size())
      throw argument_error(mesh_->world().world_rank(), operation,
                           "a tensor bound to an update's buffer keeps its shape: it is " + extents_string(extents()) +
                               ", the value assigned " + extents_string(other.extents()));
    copy_elements_priced(other.data(), storage_.data(), operation);
  }

  // A copy on a device takes its time like any kernel (a copy reads and writes its bytes).
  void copy_elements_priced(std::span<const T> from, T* to, const char* operation) {
    run_copy<T>(mesh_->world(), static_cast<std::int64_t>(from.size()), operation, [&] { copy_elements<T>(from, to); });
  }

  std::size_t checked(int b, const char* operation) const {
    if (b < 0 || b >= block_count())
      throw argument_error(
          mesh_->world().world_rank(), operation,
          "this rank holds " + std::to_string(block_count()) + " blocks, not block " + std::to_string(b));
    return static_cast<std::size_t>(b);
  }

  Mesh* mesh_;
  mapping_type mapping_;
  int rank_;
  std::vector<block_info> blocks_;
  std::vector<std::size_t> offsets_;
  shared_buffer<T> storage_;
  bool bound_ = false;
};

namespace detail {
// The one way a partial sum's storage becomes its final layout's: reduce of a temporary
// (tensor/reduce.hpp), after summing the addends where they are. Anywhere else it would pass an addend
// off as the sum.
struct summed_in_place {
  template <class T, class Partial, class Mesh>
  [[nodiscard]] static dtensor<T, typename Partial::final_layout, Mesh> final_tensor(
      dtensor<T, Partial, Mesh>&& summed) {
    return dtensor<T, typename Partial::final_layout, Mesh>(std::move(summed));
  }
};
}  // namespace detail

// A tensor whose element (i, j) is f(i, j); each rank evaluates f on its own elements only.
template <class Layout, class Mesh, class F>
requires std::invocable<F&, std::int64_t, std::int64_t>
[[nodiscard]] auto from_function(Mesh& mesh, matrix_extents extents, F&& f) try {
  using T = std::remove_cvref_t<std::invoke_result_t<F&, std::int64_t, std::int64_t>>;
  dtensor<T, Layout, Mesh> tensor(mesh, extents);
  if (!element_memory::stored_on_this_thread()) return tensor;  // shapes only: f is never asked
  for (int b = 0; b < tensor.block_count(); ++b) {
    const block_info& info = tensor.block(b);
    auto local = tensor.local(b);
    for (std::int64_t r = 0; r < info.rows; ++r)
      for (std::int64_t c = 0; c < info.cols; ++c) local(r, c) = f(info.row_offset + r, info.col_offset + c);
  }
  return tensor;
} catch (...) {
  rethrow_within_call(mesh.world().world_rank(),
                      call_text("from_function<" + layout_name<Layout>() + ">", extents_string(extents)));
}

// A tensor from this rank's blocks, in the order and of the extents the layout gives this rank
// (mapping().block(rank, b)); throws argument_error when their number or shapes differ.
template <class Layout, class Mesh, class T>
[[nodiscard]] dtensor<T, Layout, Mesh> from_blocks(
    Mesh& mesh, matrix_extents extents,
    const std::vector<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>& blocks) try {
  dtensor<T, Layout, Mesh> tensor(mesh, extents);
  const int rank = mesh.world().world_rank();
  if (static_cast<int>(blocks.size()) != tensor.block_count())
    throw argument_error(rank, "from_blocks",
                         "the layout gives this rank " + std::to_string(tensor.block_count()) + " blocks, " +
                             std::to_string(blocks.size()) + " were given");
  for (int b = 0; b < tensor.block_count(); ++b) {
    const auto& given = blocks[static_cast<std::size_t>(b)];
    const block_info& info = tensor.block(b);
    if (given.rows() != info.rows || given.cols() != info.cols)
      throw argument_error(rank, "from_blocks",
                           "block " + std::to_string(b) + " is " + extents_string(given.rows(), given.cols()) +
                               ", the layout gives this rank a " + extents_string(info.rows, info.cols) +
                               " block at (" + std::to_string(info.row_offset) + ", " +
                               std::to_string(info.col_offset) + ")");
    tensor.local(b) = given;
  }
  return tensor;
} catch (...) {
  rethrow_within_call(mesh.world().world_rank(),
                      call_text("from_blocks<" + layout_name<Layout>() + ">", extents_string(extents),
                                std::to_string(blocks.size()) + " blocks"));
}

}  // namespace shardwise
