#pragma once
// The general redistribution path: move a matrix held under one layout mapping into the blocks of
// another with a single all_to_all_v. scatter, gather, all_gather and redistribute are all this, with
// different pairs of mappings (tensor/distribute.hpp).
//
// Who sends what: every rectangle where a source block meets a destination block is sent once. When the
// source replicates a block, the receiver takes it from itself if it holds a copy, otherwise from the
// block's owner() (the lowest rank holding it). Sender and receiver enumerate the rectangles of each
// (sender, receiver) pair in the same order — source blocks, then destination blocks, rows of each
// rectangle — so the packed stream needs no headers. Cost: each rank pairs its blocks with every
// other rank's, O(P * blocks^2) index work; fine for the few blocks per rank of split layouts.
//
// The fast path: when every rank finds each of its destination blocks inside one of its own source
// blocks (slicing a replicated matrix: replicated -> anything, row_1d -> block_2d on a 2-D mesh; or the
// same cuts under two names), each rank copies locally and nothing travels. Every rank decides this from
// the mappings alone, for all ranks, so all of them skip the collective or none does.
#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shardwise/core/error.hpp"
#include "shardwise/layout/layout.hpp"

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

// Whether `sender`'s copy of source block `held` is the one `receiver` takes.
template <layout_mapping From>
[[nodiscard]] bool sends(const From& from, int sender, const block_info& held, int receiver) {
  if constexpr (!From::is_replicated) {
    return true;  // nobody else holds it
  } else {
    for (int b = 0; b < from.block_count(receiver); ++b)
      if (from.block(receiver, b) == held) return sender == receiver;
    return from.owner(held.row_offset, held.col_offset).rank == sender;
  }
}

// visit(source block, its index, destination block, its index, rectangle) for every rectangle
// `sender` sends `receiver`, in the order both of them use.
template <layout_mapping From, layout_mapping To, class Visit>
void for_each_transfer(const From& from, const To& to, int sender, int receiver, Visit&& visit) {
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

// Where each of `rank`'s blocks starts in its storage (blocks back to back, stored extents).
template <layout_mapping M>
[[nodiscard]] std::vector<std::size_t> block_starts(const M& mapping, int rank) {
  std::vector<std::size_t> starts;
  std::size_t next = 0;
  for (int b = 0; b < mapping.block_count(rank); ++b) {
    starts.push_back(next);
    next += static_cast<std::size_t>(mapping.block(rank, b).stored_elements());
  }
  return starts;
}

[[nodiscard]] inline bool contains(const block_info& outer, const block_info& inner) {
  return outer.row_offset <= inner.row_offset && outer.col_offset <= inner.col_offset &&
         inner.row_offset + inner.rows <= outer.row_offset + outer.rows &&
         inner.col_offset + inner.cols <= outer.col_offset + outer.cols;
}

// The index of `rank`'s source block that contains `wanted`, or -1.
template <layout_mapping From>
[[nodiscard]] int containing_block(const From& from, int rank, const block_info& wanted) {
  for (int b = 0; b < from.block_count(rank); ++b)
    if (contains(from.block(rank, b), wanted)) return b;
  return -1;
}

// Whether every rank holds, in its own source blocks, everything its destination blocks need.
template <layout_mapping From, layout_mapping To>
[[nodiscard]] bool needs_no_communication(const From& from, const To& to) {
  for (int rank = 0; rank < to.ranks(); ++rank)
    for (int b = 0; b < to.block_count(rank); ++b) {
      const block_info wanted = to.block(rank, b);
      if (wanted.elements() != 0 && containing_block(from, rank, wanted) < 0) return false;
    }
  return true;
}

// Collective over `world`, whose ranks are the mappings' ranks: fills `target` (this rank's blocks
// under `to`) from `source` (this rank's blocks under `from`). Padding in `target` is left untouched.
template <class T, class Communicator, layout_mapping From, layout_mapping To>
void exchange(Communicator& world, const From& from, std::span<const T> source, const To& to, std::span<T> target,
              std::string_view operation) {
  const int me = world.rank();
  const int ranks = world.size();
  if (needs_no_communication(from, to)) {
    const std::vector<std::size_t> source_starts = block_starts(from, me);
    const std::vector<std::size_t> target_starts = block_starts(to, me);
    for (int db = 0; db < to.block_count(me); ++db) {
      const block_info wanted = to.block(me, db);
      if (wanted.elements() == 0) continue;
      const int sb = containing_block(from, me, wanted);
      const block_info held = from.block(me, sb);
      const T* in = source.data() + source_starts[static_cast<std::size_t>(sb)] +
                    (wanted.row_offset - held.row_offset) * held.stored_cols + (wanted.col_offset - held.col_offset);
      T* out = target.data() + target_starts[static_cast<std::size_t>(db)];
      for (std::int64_t r = 0; r < wanted.rows; ++r)
        std::copy(in + r * held.stored_cols, in + r * held.stored_cols + wanted.cols, out + r * wanted.stored_cols);
    }
    return;
  }
  auto count = [&](std::size_t elements) {
    if (elements > static_cast<std::size_t>(INT_MAX))
      throw argument_error(world.world_rank(), operation,
                           std::to_string(elements) +
                               " elements would travel between one pair of ranks; "
                               "all_to_all_v counts are int, so at most " +
                               std::to_string(INT_MAX));
    return static_cast<int>(elements);
  };

  const std::vector<std::size_t> source_starts = block_starts(from, me);
  std::vector<T> outgoing;
  std::vector<int> send_counts(static_cast<std::size_t>(ranks));
  for (int receiver = 0; receiver < ranks; ++receiver) {
    const std::size_t before = outgoing.size();
    for_each_transfer(
        from, to, me, receiver, [&](const block_info& held, int sb, const block_info&, int, const rectangle& part) {
          const T* first = source.data() + source_starts[static_cast<std::size_t>(sb)] +
                           (part.row - held.row_offset) * held.stored_cols + (part.col - held.col_offset);
          for (std::int64_t r = 0; r < part.rows; ++r)
            outgoing.insert(outgoing.end(), first + r * held.stored_cols, first + r * held.stored_cols + part.cols);
        });
    send_counts[static_cast<std::size_t>(receiver)] = count(outgoing.size() - before);
  }

  struct arrival {
    int block;
    block_info wanted;
    rectangle part;
  };
  std::vector<arrival> arrivals;
  std::vector<int> receive_counts(static_cast<std::size_t>(ranks));
  std::size_t incoming_total = 0;
  for (int sender = 0; sender < ranks; ++sender) {
    std::size_t elements = 0;
    for_each_transfer(from, to, sender, me,
                      [&](const block_info&, int, const block_info& wanted, int db, const rectangle& part) {
                        arrivals.push_back({db, wanted, part});
                        elements += static_cast<std::size_t>(part.rows * part.cols);
                      });
    receive_counts[static_cast<std::size_t>(sender)] = count(elements);
    incoming_total += elements;
  }

  std::vector<T> incoming(incoming_total);
  world.all_to_all_v(outgoing, send_counts, incoming, receive_counts);

  const std::vector<std::size_t> target_starts = block_starts(to, me);
  const T* next = incoming.data();
  for (const arrival& a : arrivals) {
    T* first = target.data() + target_starts[static_cast<std::size_t>(a.block)] +
               (a.part.row - a.wanted.row_offset) * a.wanted.stored_cols + (a.part.col - a.wanted.col_offset);
    for (std::int64_t r = 0; r < a.part.rows; ++r, next += a.part.cols)
      std::copy(next, next + a.part.cols, first + r * a.wanted.stored_cols);
  }
}

}  // namespace shardwise::detail
