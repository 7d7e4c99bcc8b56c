#pragma once
// What one DLRM training step reads on one rank: its samples' dense features and labels, and the bags
// of every table over the whole global batch (the embedding's all-to-all moves the pooled rows to the
// samples' ranks). data::dlrm_generator makes them; model::dlrm reads them.
#include <cstdint>
#include <vector>

namespace shardwise::model {

// One rank's part of a batch of samples [first_sample, first_sample + global_batch) of a stream.
template <class T>
struct dlrm_batch {
  struct bags {
    std::vector<std::int64_t> offsets{0};  // global batch + 1
    std::vector<std::int64_t> indices;
  };
  std::int64_t first_row = 0;  // this rank's samples: rows [first_row, first_row + rows) of the batch
  std::int64_t rows = 0;
  std::vector<T> dense;      // rows × dense_features, row-major
  std::vector<T> labels;     // rows, 0 or 1
  std::vector<bags> sparse;  // per table asked for, over the whole global batch
};

}  // namespace shardwise::model
