#pragma once
// What the sources of the Transformer block test share: the block's results gathered whole, the same
// block on one rank, and the comparison of a family's block with it. The 2-D and 3-D families'
// comparisons compile in sources of their own (transformer_block_2d.cpp, _3d.cpp; `extern template`
// below), the 1-D family's with the serial block in transformer_block_test.cpp, so that no object compiles
// more than two blocks.
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/nn/recomputation.hpp"
#include "shardwise/nn/transformer_block.hpp"
#include "shardwise/tensor/distribute.hpp"
#include "support/backends.hpp"

namespace shardwise::testing {

using matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

inline double input_value(std::int64_t i, std::int64_t j) { return std::sin(0.3 * double(i) + 0.7 * double(j)); }
inline double gradient_value(std::int64_t i, std::int64_t j) { return std::cos(0.5 * double(i) - 0.2 * double(j)); }

// A block's results, gathered: output, input gradient, and every parameter gradient in visiting order.
struct block_results {
  matrix output;
  matrix input_gradient;
  std::vector<matrix> parameter_gradients;
};

template <class Family, class Mesh>
block_results run_block(Mesh& mesh, const nn::block_options& options, std::int64_t batch) {
  nn::transformer_block<double, Family, Mesh> block(mesh, options, 7);
  const matrix_extents extents{batch * options.sequence, options.hidden};
  const auto x = from_function<typename Family::input>(mesh, extents, input_value);
  const auto dy = from_function<typename Family::input>(mesh, extents, gradient_value);
  const auto y = block.forward(x);
  const auto dx = block.backward(dy);
  block_results results{all_gather(y), all_gather(dx), {}};
  block.for_each_parameter(
      [&](const std::string&, auto& p) { results.parameter_gradients.push_back(all_gather(p.gradient)); });
  return results;
}

// The same block on one rank (transformer_block_test.cpp).
block_results serial_block(const nn::block_options& options, std::int64_t batch);

inline void expect_near(const matrix& got, const matrix& expected, const std::string& what) {
  ASSERT_EQ(got.rows(), expected.rows()) << what;
  ASSERT_EQ(got.cols(), expected.cols()) << what;
  EXPECT_LT((got - expected).cwiseAbs().maxCoeff(), 1e-10) << what;
}

// The meshes of this executable's backend on which a family's block runs.
template <class Family>
using family_mesh = process_mesh<backend::communicator_type, Family::mesh_dimensions>;

template <class Family>
void check_family(family_mesh<Family>& mesh, const nn::block_options& options, std::int64_t batch,
                  const std::string& name) {
  SCOPED_TRACE(name + " on grid " + shape_string(mesh.shape()));
  const auto got = run_block<Family>(mesh, options, batch);
  const auto expected = serial_block(options, batch);
  expect_near(got.output, expected.output, "output");
  expect_near(got.input_gradient, expected.input_gradient, "input gradient");
  ASSERT_EQ(got.parameter_gradients.size(), expected.parameter_gradients.size());
  for (std::size_t p = 0; p < got.parameter_gradients.size(); ++p)
    expect_near(got.parameter_gradients[p], expected.parameter_gradients[p],
                "gradient of parameter " + std::to_string(p));

  // Recomputing attention's probabilities, or all the activations, in the backward pass runs the same
  // operations on the same input: the same bits.
  for (const auto what : {nn::recomputation::attention, nn::recomputation::block}) {
    SCOPED_TRACE("recomputing " + std::string(nn::name_of(what)));
    nn::block_options recomputing = options;
    recomputing.recompute = what;
    const auto recomputed = run_block<Family>(mesh, recomputing, batch);
    EXPECT_TRUE(recomputed.output == got.output) << "output";
    EXPECT_TRUE(recomputed.input_gradient == got.input_gradient) << "input gradient";
    ASSERT_EQ(recomputed.parameter_gradients.size(), got.parameter_gradients.size());
    for (std::size_t p = 0; p < got.parameter_gradients.size(); ++p)
      EXPECT_TRUE(recomputed.parameter_gradients[p] == got.parameter_gradients[p]) << "gradient of parameter " << p;
  }
}

extern template void check_family<nn::sequence_parallel_1d<padded>>(family_mesh<nn::sequence_parallel_1d<padded>>&,
                                                                    const nn::block_options&, std::int64_t,
                                                                    const std::string&);
extern template void check_family<nn::tensor_parallel_2d<>>(family_mesh<nn::tensor_parallel_2d<>>&,
                                                            const nn::block_options&, std::int64_t, const std::string&);
extern template void check_family<nn::tensor_parallel_3d<>>(family_mesh<nn::tensor_parallel_3d<>>&,
                                                            const nn::block_options&, std::int64_t, const std::string&);

}  // namespace shardwise::testing
