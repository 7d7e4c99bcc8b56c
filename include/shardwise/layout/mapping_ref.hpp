#pragma once
// mapping_ref: any layout mapping, referred to with its type erased. Code that only asks a mapping
// questions (which blocks a rank holds, who owns an element) takes one, so that it compiles once instead
// of once for every layout or pair of layouts it is used with: the redistribution (tensor/exchange.hpp)
// is instantiated for each pair of layouts a program moves a tensor between, and its planning was most
// of what a program of many layouts compiled. A question costs an indirect call, small beside the index
// arithmetic each mapping does to answer it.
//
// A reference, like std::span: the mapping must outlive it. Taking a temporary is fine for the duration
// of one call, f(on_one_rank(...)), which is how it is used.
#include <concepts>
#include <cstdint>

#include "shardwise/layout/layout.hpp"

namespace shardwise {

class mapping_ref {
 public:
  // Not for mapping_ref itself, which copies: asking whether it is a mapping would ask whether it copies.
  template <class M>
  requires(!std::same_as<M, mapping_ref>) && layout_mapping<M>
  mapping_ref(const M& mapping)  // NOLINT(google-explicit-constructor): converts as a span does
      : mapping_(&mapping),
        extents_(mapping.extents()),
        ranks_(mapping.ranks()),
        is_replicated_(M::is_replicated),
        block_count_(+[](const void* m, int rank) { return static_cast<int>(as<M>(m).block_count(rank)); }),
        block_(+[](const void* m, int rank, int b) { return as<M>(m).block(rank, b); }),
        owner_(+[](const void* m, std::int64_t i, std::int64_t j) { return as<M>(m).owner(i, j); }) {}

  [[nodiscard]] matrix_extents extents() const noexcept { return extents_; }
  [[nodiscard]] int ranks() const noexcept { return ranks_; }
  // The mapping's M::is_replicated: whether some block is held by more than one rank.
  [[nodiscard]] bool is_replicated() const noexcept { return is_replicated_; }
  [[nodiscard]] int block_count(int rank) const { return block_count_(mapping_, rank); }
  [[nodiscard]] block_info block(int rank, int b) const { return block_(mapping_, rank, b); }
  [[nodiscard]] location owner(std::int64_t i, std::int64_t j) const { return owner_(mapping_, i, j); }

 private:
  template <class M>
  static const M& as(const void* mapping) {
    return *static_cast<const M*>(mapping);
  }

  const void* mapping_;
  matrix_extents extents_;
  int ranks_;
  bool is_replicated_;
  int (*block_count_)(const void*, int);
  block_info (*block_)(const void*, int, int);
  location (*owner_)(const void*, std::int64_t, std::int64_t);
};

}  // namespace shardwise
