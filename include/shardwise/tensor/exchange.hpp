#pragma once
// Moving a matrix held under one layout mapping into the blocks of another, over a process_mesh.
// scatter, gather, all_gather and redistribute are all this, with different pairs of mappings
// (tensor/distribute.hpp). Three paths, the cheapest that applies; every rank decides from the
// mappings alone, for all ranks, so all of them take the same one:
//
// 1. No communication, when every rank finds each of its destination blocks inside one of its own
//    source blocks (slicing a replicated matrix: replicated -> anything; adding mesh axes to a split,
//    rows_over<0> -> rows_over<0, 1>; the same cuts under two names). Each rank copies locally.
// 2. One all_gather along mesh axis a, when every rank's destination block is exactly tiled by the
//    source blocks of the ranks on its line along a, and those blocks are stored equally large (what
//    all_gather needs): the destination is the source with axis a dropped from a dimension's list,
//    rows_over<0, 1> -> rows_over<0>, col_1d -> replicated, and the pieces line up under the padding
//    rules (always for exact; for padded and ragged when the cuts happen to agree). Failing every single
//    axis, one all_gather over all the mesh's axes at once, when the source blocks tile the destination
//    over the whole grid: block_2d -> replicated, a 3-D cube layout -> replicated.
// 3. The general path, one all_to_all_v over the mesh's world: every rectangle where a source block
//    meets a destination block is sent once. When the source replicates a block, the receiver takes it
//    from itself if it holds a copy, otherwise from the block's owner() (the lowest rank holding it).
//    Sender and receiver enumerate the rectangles of each (sender, receiver) pair in the same order —
//    source blocks, then destination blocks, rows of each rectangle — so the packed stream needs no
//    headers. Cost: each rank pairs its blocks with every other rank's, O(P * blocks^2) index work;
//    fine for the few blocks per rank of split layouts.
// A rank's copies between its blocks and the collectives' buffers are one kernel per path
// (core/kernel.hpp), priced as memory traffic where the backend models time; the buffers are working
// memory (shared_buffer::scratch), so a shapes-only run neither fills nor copies them. Path 2 gathers
// straight into the destination, with no buffer and no copy, when the pieces are its rows in the
// group's order (col_1d -> replicated, rows_over<0, 1> -> rows_over<0>, unpadded).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shardwise/core/checked_arithmetic.hpp"
#include "shardwise/core/error.hpp"
#include "shardwise/core/kernel.hpp"
#include "shardwise/core/shared_buffer.hpp"
#include "shardwise/layout/layout.hpp"
#include "shardwise/layout/mapping_ref.hpp"
#include "shardwise/mesh/shape.hpp"

namespace shardwise::detail {

// The whole matrix as one block on `root`: the source of scatter and the target of gather.
class on_one_rank {
 public:
  static constexpr bool is_replicated = false;
  static constexpr bool is_balanced = false;

  on_one_rank(matrix_extents extents, int ranks, int root) : extents_(extents), ranks_(ranks), root_(root) {}

  [[nodiscard]] matrix_extents extents() const noexcept { return extents_; }
  [[nodiscard]] int ranks() const noexcept { return ranks_; }
  [[nodiscard]] int replicas() const noexcept { return 1; }
  [[nodiscard]] int block_count(int rank) const noexcept { return rank == root_ ? 1 : 0; }
  [[nodiscard]] block_info block(int rank, int b) const {
    check_block(rank, ranks_, b, block_count(rank));
    return {0, 0, extents_.rows, extents_.cols, extents_.rows, extents_.cols};
  }
  [[nodiscard]] location owner(std::int64_t i, std::int64_t j) const {
    check_index(extents_, i, j);
    return {root_, 0, i, j};
  }

 private:
  matrix_extents extents_;
  int ranks_;
  int root_;
};

struct rectangle {
  std::int64_t row = 0;
  std::int64_t col = 0;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
};

[[nodiscard]] inline rectangle overlap(const block_info& a, const block_info& b) {
  const std::int64_t row = std::max(a.row_offset, b.row_offset);
  const std::int64_t col = std::max(a.col_offset, b.col_offset);
  const std::int64_t row_end = std::min(a.row_offset + a.rows, b.row_offset + b.rows);
  const std::int64_t col_end = std::min(a.col_offset + a.cols, b.col_offset + b.cols);
  return {row, col, std::max<std::int64_t>(0, row_end - row), std::max<std::int64_t>(0, col_end - col)};
}

// The planning below takes its mappings as mapping_ref (layout/mapping_ref.hpp), so it compiles once,
// not once for each pair of layouts a program redistributes between; only moving elements depends on
// the element type and the mesh. Its queries walk the blocks in plain loops, not layout/blocks.hpp's
// views, whose types would be instantiated for every pair as well (docs/architecture.md).

// Whether `rank` holds `block` itself, as one of its blocks.
[[nodiscard]] inline bool holds_block(mapping_ref mapping, int rank, const block_info& block) {
  for (int b = 0; b < mapping.block_count(rank); ++b)
    if (mapping.block(rank, b) == block) return true;
  return false;
}

// Whether `sender`'s copy of source block `held` is the one `receiver` takes.
[[nodiscard]] inline bool sends(mapping_ref from, int sender, const block_info& held, int receiver) {
  if (!from.is_replicated()) return true;  // nobody else holds it
  if (holds_block(from, receiver, held)) return sender == receiver;
  return from.owner(held.row_offset, held.col_offset).rank == sender;
}

// visit(source block, its index, destination block, its index, rectangle) for every rectangle
// `sender` sends `receiver`, in the order both of them use.
template <class Visit>
void for_each_transfer(mapping_ref from, mapping_ref to, int sender, int receiver, Visit&& visit) {
  for (int sb = 0; sb < from.block_count(sender); ++sb) {
    const block_info held = from.block(sender, sb);
    if (held.elements() == 0 || !sends(from, sender, held, receiver)) continue;
    for (int db = 0; db < to.block_count(receiver); ++db) {
      const block_info wanted = to.block(receiver, db);
      const rectangle part = overlap(held, wanted);
      if (part.rows > 0 && part.cols > 0) visit(held, sb, wanted, db, part);
    }
  }
}

[[nodiscard]] inline bool contains(const block_info& outer, const block_info& inner) {
  return outer.row_offset <= inner.row_offset && outer.col_offset <= inner.col_offset &&
         inner.row_offset + inner.rows <= outer.row_offset + outer.rows &&
         inner.col_offset + inner.cols <= outer.col_offset + outer.cols;
}

// The index of `rank`'s source block that contains `wanted`, or -1.
[[nodiscard]] inline int containing_block(mapping_ref from, int rank, const block_info& wanted) {
  for (int b = 0; b < from.block_count(rank); ++b)
    if (contains(from.block(rank, b), wanted)) return b;
  return -1;
}

// Whether every rank holds, in its own source blocks, everything its destination blocks need (path 1).
[[nodiscard]] inline bool needs_no_communication(mapping_ref from, mapping_ref to) {
  for (int rank = 0; rank < to.ranks(); ++rank)
    for (int b = 0; b < to.block_count(rank); ++b) {
      const block_info wanted = to.block(rank, b);
      if (wanted.elements() != 0 && containing_block(from, rank, wanted) < 0) return false;
    }
  return true;
}

// Whether, in every group along `axes`, each rank holds one block under `pieces` and one under `whole`,
// the blocks under `whole` are all the same, and the blocks under `pieces` tile it exactly (contained in
// it, distinct — and so disjoint, by the layout contract — and covering it), stored equally large. Then
// an all_gather over the group builds `whole` from `pieces` (path 2), and a reduce-scatter over it cuts
// addends of `whole` into sums of `pieces` (tensor/exchange_sum.hpp). One pass over the ranks.
template <std::size_t D>
[[nodiscard]] bool tiles_over(mapping_ref pieces, mapping_ref whole, const coordinates<D>& grid,
                              const mesh_axes& axes) {
  const int members = group_size(grid, axes);
  for (int first = 0; first < whole.ranks(); ++first) {
    const coordinates<D> origin = point_in_grid(grid, first);
    if (rank_in_group(origin, grid, axes) != 0) continue;  // each group once, from its first rank
    if (whole.block_count(first) != 1 || pieces.block_count(first) != 1) return false;
    const block_info wanted = whole.block(first, 0);
    const std::int64_t stored = pieces.block(first, 0).stored_elements();
    std::int64_t covered = 0;
    std::vector<block_info> seen;  // pieces replicated within the group are equal blocks: they do not tile
    for (int k = 0; k < members; ++k) {
      const int rank = rank_in_grid(grid, point_in_group(origin, grid, axes, k));
      if (whole.block_count(rank) != 1 || whole.block(rank, 0) != wanted || pieces.block_count(rank) != 1) return false;
      const block_info held = pieces.block(rank, 0);
      if (held.stored_elements() != stored) return false;
      if (held.elements() == 0) continue;
      if (!contains(wanted, held) || std::ranges::find(seen, held) != seen.end()) return false;
      seen.push_back(held);
      covered += held.elements();
    }
    if (covered != wanted.elements()) return false;
  }
  return true;
}

// The group of mesh axes of path 2, or none (empty): one axis, or else all the axes the grid does not
// leave at one rank together.
template <std::size_t D>
[[nodiscard]] mesh_axes gathering_axes(mapping_ref from, mapping_ref to, const coordinates<D>& grid) {
  mesh_axes cut;
  for (std::size_t a = 0; a < D; ++a)
    if (grid[a] > 1) cut.push_back(static_cast<int>(a));
  for (const int a : cut)
    if (tiles_over(from, to, grid, mesh_axes{a})) return {a};
  if (cut.size() > 1 && tiles_over(from, to, grid, cut)) return cut;
  return {};
}

// The communicator of this rank's group along `axes`: an axis's own for one axis, the mesh's when the
// group holds every rank, otherwise one made for the group at its first use.
template <class Mesh>
[[nodiscard]] auto& group_along(Mesh& mesh, const mesh_axes& axes) {
  if (axes.size() == 1) return mesh.axis(axes.front());
  if (group_size(mesh.shape(), axes) == mesh.world().size()) return mesh.world();
  return mesh.group(std::span<const int>(axes));
}

// visit(k, block) for each rank of this rank's group along `axes`: k its rank in that group, `block` its
// one block under `mapping`.
template <class Mesh, class Visit>
void for_each_in_group(Mesh& mesh, const mesh_axes& axes, mapping_ref mapping, Visit&& visit) {
  const int members = group_size(mesh.shape(), axes);
  for (int k = 0; k < members; ++k)
    visit(k, mapping.block(mesh.rank_of(point_in_group(mesh.coords(), mesh.shape(), axes, k)), 0));
}

// Where global element (row, col) lies in the storage of `block`, which holds it.
[[nodiscard]] inline std::int64_t offset_in(const block_info& block, std::int64_t row, std::int64_t col) {
  return (row - block.row_offset) * block.stored_cols + (col - block.col_offset);
}

// Whether the blocks under `pieces` of this rank's group along `axes` lie in the storage of `whole` (of
// `whole_size` elements) one after the other in the group's order, each `piece_size` elements of whole,
// unpadded rows: row cuts of an unpadded row-major block. Then the group's all_gather writes `whole` as
// it is stored and its reduce_scatter reads it so, with no copy into or out of the group's order.
template <class Mesh>
[[nodiscard]] bool stored_in_group_order(Mesh& mesh, const mesh_axes& axes, mapping_ref pieces, const block_info& whole,
                                         std::size_t piece_size, std::size_t whole_size) {
  const auto members = static_cast<std::size_t>(group_size(mesh.shape(), axes));
  if (piece_size == 0 || piece_size * members != whole_size || whole.stored_cols != whole.cols) return false;
  bool in_order = true;
  for_each_in_group(mesh, axes, pieces, [&](int k, const block_info& piece) {
    in_order = in_order && piece.col_offset == whole.col_offset && piece.cols == whole.cols &&
               piece.stored_cols == piece.cols && piece.stored_rows == piece.rows &&
               static_cast<std::size_t>(piece.elements()) == piece_size &&
               offset_in(whole, piece.row_offset, piece.col_offset) ==
                   static_cast<std::int64_t>(static_cast<std::size_t>(k) * piece_size);
  });
  return in_order;
}

// Copies a rows x cols rectangle between row-major storages of the given row strides.
template <class T>
void copy_rectangle(const T* in, std::int64_t in_stride, T* out, std::int64_t out_stride, std::int64_t rows,
                    std::int64_t cols) {
  for (std::int64_t r = 0; r < rows; ++r)
    std::copy(in + r * in_stride, in + r * in_stride + cols, out + r * out_stride);
}

// Path 1: this rank copies each destination block out of the source block containing it.
template <class T, class Communicator>
void copy_locally(Communicator& world, mapping_ref from, std::span<const T> source, mapping_ref to, std::span<T> target,
                  std::string_view operation) {
  const int me = world.rank();
  std::int64_t elements = 0;
  for (int db = 0; db < to.block_count(me); ++db) elements += to.block(me, db).elements();
  run_copy<T>(world, elements, operation, [&] {
    const std::vector<std::int64_t> source_starts = block_starts(from, me);
    const std::vector<std::int64_t> target_starts = block_starts(to, me);
    for (int db = 0; db < to.block_count(me); ++db) {
      const block_info wanted = to.block(me, db);
      if (wanted.elements() == 0) continue;
      const int sb = containing_block(from, me, wanted);
      const block_info held = from.block(me, sb);
      copy_rectangle(source.data() + source_starts[static_cast<std::size_t>(sb)] +
                         (wanted.row_offset - held.row_offset) * held.stored_cols +
                         (wanted.col_offset - held.col_offset),
                     held.stored_cols, target.data() + target_starts[static_cast<std::size_t>(db)], wanted.stored_cols,
                     wanted.rows, wanted.cols);
    }
  });
}

// Path 2, collective over the group along `axes`: every rank's one source block, gathered over the
// group, and each piece put where it lies in this rank's one destination block.
template <class T, class Mesh>
void gather_over(Mesh& mesh, const mesh_axes& axes, mapping_ref from, std::span<const T> source, mapping_ref to,
                 std::span<T> target, std::string_view operation) {
  auto& group = group_along(mesh, axes);
  const block_info wanted = to.block(mesh.world().rank(), 0);
  if (stored_in_group_order(mesh, axes, from, wanted, source.size(), target.size())) {
    group.all_gather(source, target);
    return;
  }
  const auto pieces = shared_buffer<T>::scratch(source.size() * static_cast<std::size_t>(group.size()));
  group.all_gather(source, pieces.span());
  run_copy<T>(mesh.world(), wanted.elements(), operation, [&] {
    for_each_in_group(mesh, axes, from, [&](int k, const block_info& held) {
      if (held.elements() == 0) return;
      copy_rectangle(pieces.data() + static_cast<std::size_t>(k) * source.size(), held.stored_cols,
                     target.data() + offset_in(wanted, held.row_offset, held.col_offset), wanted.stored_cols, held.rows,
                     held.cols);
    });
  });
}

// Path 3, collective over `world`: one all_to_all_v of every rectangle where a source block meets a
// destination block.
template <class T, class Communicator>
void exchange_all_to_all(Communicator& world, mapping_ref from, std::span<const T> source, mapping_ref to,
                         std::span<T> target, std::string_view operation) {
  const int me = world.rank();
  const int ranks = world.size();
  auto count = [&](std::int64_t elements) {
    return checked_count(elements, world.world_rank(), operation, "all_to_all_v",
                         "elements would travel between one pair of ranks");
  };

  // A rectangle of this rank's blocks, with where it starts in the blocks' storage and its row stride.
  struct piece {
    std::int64_t start;
    std::int64_t stride;
    rectangle part;
  };
  const std::vector<std::int64_t> source_starts = block_starts(from, me);
  std::vector<piece> departures;
  std::int64_t outgoing_elements = 0;
  std::vector<int> send_counts(static_cast<std::size_t>(ranks));
  for (int receiver = 0; receiver < ranks; ++receiver) {
    std::int64_t elements = 0;
    for_each_transfer(
        from, to, me, receiver, [&](const block_info& held, int sb, const block_info&, int, const rectangle& part) {
          departures.push_back({source_starts[static_cast<std::size_t>(sb)] +
                                    (part.row - held.row_offset) * held.stored_cols + (part.col - held.col_offset),
                                held.stored_cols, part});
          elements += part.rows * part.cols;
        });
    send_counts[static_cast<std::size_t>(receiver)] = count(elements);
    outgoing_elements += elements;
  }

  const std::vector<std::int64_t> target_starts = block_starts(to, me);
  std::vector<piece> arrivals;
  std::vector<int> receive_counts(static_cast<std::size_t>(ranks));
  std::int64_t incoming_elements = 0;
  for (int sender = 0; sender < ranks; ++sender) {
    std::int64_t elements = 0;
    for_each_transfer(
        from, to, sender, me, [&](const block_info&, int, const block_info& wanted, int db, const rectangle& part) {
          arrivals.push_back({target_starts[static_cast<std::size_t>(db)] +
                                  (part.row - wanted.row_offset) * wanted.stored_cols + (part.col - wanted.col_offset),
                              wanted.stored_cols, part});
          elements += part.rows * part.cols;
        });
    receive_counts[static_cast<std::size_t>(sender)] = count(elements);
    incoming_elements += elements;
  }

  const auto outgoing = shared_buffer<T>::scratch(static_cast<std::size_t>(outgoing_elements));
  run_copy<T>(world, outgoing_elements, operation, [&] {
    T* next = outgoing.data();
    for (const piece& p : departures) {
      copy_rectangle(source.data() + p.start, p.stride, next, p.part.cols, p.part.rows, p.part.cols);
      next += p.part.rows * p.part.cols;
    }
  });
  const auto incoming = shared_buffer<T>::scratch(static_cast<std::size_t>(incoming_elements));
  world.all_to_all_v(std::span<const T>(outgoing.span()), send_counts, incoming.span(), receive_counts);
  run_copy<T>(world, incoming_elements, operation, [&] {
    const T* next = incoming.data();
    for (const piece& p : arrivals) {
      copy_rectangle(next, p.part.cols, target.data() + p.start, p.stride, p.part.rows, p.part.cols);
      next += p.part.rows * p.part.cols;
    }
  });
}

// Collective over `mesh`, whose world's ranks are the mappings' ranks: fills `target` (this rank's
// blocks under `to`) from `source` (this rank's blocks under `from`) by the cheapest path that applies.
// Padding in `target` is left untouched.
template <class T, class Mesh>
void exchange(Mesh& mesh, mapping_ref from, std::span<const T> source, mapping_ref to, std::span<T> target,
              std::string_view operation) {
  if (needs_no_communication(from, to)) {
    copy_locally(mesh.world(), from, source, to, target, operation);
  } else if (const mesh_axes axes = gathering_axes(from, to, mesh.shape()); !axes.empty()) {
    gather_over(mesh, axes, from, source, to, target, operation);
  } else {
    exchange_all_to_all(mesh.world(), from, source, to, target, operation);
  }
}

}  // namespace shardwise::detail
