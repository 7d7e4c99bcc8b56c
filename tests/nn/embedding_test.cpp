// nn::embedding on every backend, against the serial lookup on the whole tables: samples shorter than
// the table of positions (the GPT tests give it whole contexts only), element t reading position
// t mod sequence and adding its gradient there, the other positions' rows left zero; a vocabulary the
// ranks do not divide; the 1-D family's replicated activations and the sequence-parallel family's rows.
// Each element is a sum of two values, so the comparisons are exact.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "shardwise/layout/padding.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/nn/embedding.hpp"
#include "shardwise/nn/family.hpp"
#include "shardwise/tensor/distribute.hpp"
#include "support/backends.hpp"

namespace {

using namespace shardwise;
using matrix = whole_matrix<double>;

template <class Backend>
class embedding_test : public ::testing::Test {};
TYPED_TEST_SUITE(embedding_test, shardwise::testing::backends);

template <class Family, class Mesh>
void expect_serial_lookup(Mesh& line) {
  const std::int64_t vocabulary = 11, context = 5, sequence = 3, hidden = 2;
  const std::vector<std::int32_t> tokens{4, 0, 10, 10, 2, 1};  // two samples of 3
  const auto rows = static_cast<std::int64_t>(tokens.size());
  nn::embedding<double, Family, Mesh> embedding(line, vocabulary, context, hidden, 7);
  matrix table, positions;
  embedding.for_each_parameter(
      [&](const std::string& name, auto& p) { (name == "position.weight" ? positions : table) = all_gather(p.value); });
  const auto gradient = from_function<typename Family::input>(
      line, {rows, hidden}, [](std::int64_t i, std::int64_t j) { return static_cast<double>(1 + i * hidden + j); });
  const matrix dy = all_gather(gradient);
  matrix y(rows, hidden);
  matrix d_positions = matrix::Zero(context, hidden), d_table = matrix::Zero(vocabulary, hidden);
  for (Eigen::Index t = 0; t < rows; ++t) {
    const auto token = tokens[static_cast<std::size_t>(t)];
    y.row(t) = table.row(token) + positions.row(t % sequence);
    d_positions.row(t % sequence) += dy.row(t);
    d_table.row(token) += dy.row(t);
  }
  EXPECT_EQ(all_gather(embedding.forward(tokens, sequence)), y);
  embedding.backward(gradient);
  embedding.for_each_parameter([&](const std::string& name, auto& p) {
    EXPECT_EQ(all_gather(p.gradient), name == "position.weight" ? d_positions : d_table) << name;
  });
}

TYPED_TEST(embedding_test, samples_shorter_than_the_positions_equal_the_serial_lookup) {
  TypeParam::run(
      [](communicator auto& world) {
        process_mesh<std::remove_cvref_t<decltype(world)>, 1> line(world, {world.size()});
        {
          SCOPED_TRACE("1-D");
          expect_serial_lookup<nn::tensor_parallel_1d<padded>>(line);
        }
        SCOPED_TRACE("sequence-parallel");
        expect_serial_lookup<nn::sequence_parallel_1d<padded>>(line);
      },
      {1, 2, 3, 4, 8});
}

}  // namespace
