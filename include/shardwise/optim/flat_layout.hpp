#pragma once
// How the parameters of a data-parallel update are packed for sharding. Tensors lie back to back in
// the order given, grouped into buckets (a bucket is one reduce-scatter and one all-gather per step);
// each bucket is padded at its end to a multiple of the number of replicas N, and replica r owns block r
// of every bucket, its shard. Padding is part of no tensor, so it lies only in the last shards of a
// bucket and never enters a reduction: the update visits tensors' elements only (segments below).
// Packing before padding keeps padding below N elements per bucket, however many tensors share it.
#include <algorithm>
#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "shardwise/optim/optimizer.hpp"

namespace shardwise::optim {

class flat_layout {
 public:
  struct bucket {
    std::size_t first_tensor = 0;  // tensors [first_tensor, end_tensor)
    std::size_t end_tensor = 0;
    std::size_t begin = 0;         // flat index of the bucket's first element
    std::size_t elements = 0;      // its tensors' elements
    std::size_t padded = 0;        // elements rounded up to a multiple of N
    std::size_t shard = 0;         // padded / N: one replica's block
    std::size_t shard_offset = 0;  // where this bucket's block starts among one replica's blocks
  };

  // A run of one tensor's elements inside one replica's block: elements [first, first + count) of
  // `tensor`, at flat index `flat`, and at `local` among that replica's concatenated blocks.
  struct segment {
    std::size_t tensor = 0;
    std::size_t first = 0;
    std::size_t count = 0;
    std::size_t flat = 0;
    std::size_t local = 0;
  };

  // bucket_elements caps a bucket (a larger tensor gets a bucket of its own); 0 puts all in one.
  flat_layout(std::vector<parameter_shape> shapes, int replicas, std::size_t bucket_elements = 0)
      : shapes_(std::move(shapes)), replicas_(std::max(replicas, 1)), bucket_elements_(bucket_elements) {
    const auto n = static_cast<std::size_t>(replicas_);
    offsets_.reserve(shapes_.size());
    std::size_t flat = 0;
    for (std::size_t t = 0; t < shapes_.size(); ++t) {
      const std::size_t size = shapes_[t].size();
      const bool full = !buckets_.empty() && bucket_elements != 0 && buckets_.back().elements != 0 &&
                        buckets_.back().elements + size > bucket_elements;
      if (buckets_.empty() || full) {
        if (!buckets_.empty()) flat = close(buckets_.back(), n);
        buckets_.push_back({t, t, flat, 0, 0, 0, shard_elements_});
      }
      offsets_.push_back(flat + buckets_.back().elements);
      buckets_.back().elements += size;
      buckets_.back().end_tensor = t + 1;
    }
    if (!buckets_.empty()) close(buckets_.back(), n);
  }

  [[nodiscard]] int replicas() const noexcept { return replicas_; }
  [[nodiscard]] std::size_t bucket_elements() const noexcept { return bucket_elements_; }
  [[nodiscard]] std::span<const parameter_shape> shapes() const noexcept { return shapes_; }
  [[nodiscard]] std::size_t tensor_count() const noexcept { return shapes_.size(); }
  [[nodiscard]] parameter_shape shape(std::size_t tensor) const { return shapes_[tensor]; }
  [[nodiscard]] std::size_t offset(std::size_t tensor) const { return offsets_[tensor]; }
  [[nodiscard]] std::span<const bucket> buckets() const noexcept { return buckets_; }
  [[nodiscard]] const bucket& bucket_of(std::size_t tensor) const {
    return *std::ranges::find_if(buckets_, [&](const bucket& b) { return tensor < b.end_tensor; });
  }

  // Elements of all tensors, without padding.
  [[nodiscard]] std::size_t parameter_elements() const noexcept { return parameter_elements_; }
  // The length of a flat buffer holding every bucket, padding included.
  [[nodiscard]] std::size_t padded_elements() const noexcept { return padded_elements_; }
  // One replica's blocks of all buckets.
  [[nodiscard]] std::size_t shard_elements() const noexcept { return shard_elements_; }

  // The tensors' elements inside replica r's blocks, bucket by bucket, in flat order.
  [[nodiscard]] std::vector<segment> segments_of(int replica) const {
    std::vector<segment> runs;
    for (const bucket& b : buckets_) {
      const std::size_t block_begin = b.begin + static_cast<std::size_t>(replica) * b.shard;
      const std::size_t block_end = block_begin + b.shard;
      for (std::size_t t = b.first_tensor; t < b.end_tensor; ++t) {
        const std::size_t lo = std::max(block_begin, offsets_[t]);
        const std::size_t hi = std::min(block_end, offsets_[t] + shapes_[t].size());
        if (lo < hi) runs.push_back({t, lo - offsets_[t], hi - lo, lo, b.shard_offset + (lo - block_begin)});
      }
    }
    return runs;
  }

 private:
  // Pads the bucket to a multiple of n; returns the flat index after it.
  std::size_t close(bucket& b, std::size_t n) {
    b.padded = (b.elements + n - 1) / n * n;
    b.shard = b.padded / n;
    parameter_elements_ += b.elements;
    padded_elements_ += b.padded;
    shard_elements_ += b.shard;
    return b.begin + b.padded;
  }

  std::vector<parameter_shape> shapes_;
  std::vector<std::size_t> offsets_;
  std::vector<bucket> buckets_;
  int replicas_;
  std::size_t bucket_elements_;
  std::size_t parameter_elements_ = 0;
  std::size_t padded_elements_ = 0;
  std::size_t shard_elements_ = 0;
};

}  // namespace shardwise::optim
