#pragma once
// What the sources of the DLRM test share: the typed test suite, the model's configuration and the
// batches' generator. The training steps (dlrm_training_test.cpp: a float model, its optimisers and
// the serial DLRM's steps) compile apart from the forward and backward's comparison with the serial
// DLRM (dlrm_test.cpp: a double model), so that no object compiles both models.
#include <gtest/gtest.h>

#include <cstdint>

#include "shardwise/data/dlrm_generator.hpp"
#include "shardwise/model/dlrm.hpp"
#include "support/backends.hpp"

namespace shardwise::testing {

template <class Backend>
class dlrm_model : public ::testing::Test {};
TYPED_TEST_SUITE(dlrm_model, shardwise::testing::backends);

inline constexpr std::int64_t batch = 11;

inline model::dlrm_config config_with(fused::pooling how) {
  model::dlrm_config c;
  c.dense_features = 5;
  c.bottom = {6, 4};
  c.top = {5, 1};
  c.tables = {{13, 0, fused::table_sharding::row_wise},
              {7, 0, fused::table_sharding::table_wise},
              {5, 0, fused::table_sharding::table_wise}};
  c.pooling = how;
  c.seed = 3;
  return c;
}

inline data::dlrm_generator generator() {
  data::dlrm_data_config c;
  c.dense_features = 5;
  c.table_rows = {13, 7, 5};
  c.min_bag_length = 0;  // empty bags too
  c.max_bag_length = 4;
  c.seed = 9;
  return data::dlrm_generator(c);
}

}  // namespace shardwise::testing
