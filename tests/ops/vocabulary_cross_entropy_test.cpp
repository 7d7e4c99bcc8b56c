// The vocabulary-parallel cross-entropy (ops/vocabulary_cross_entropy.hpp), forward and backward, with
// the vocabulary's rows cut over 1-D, 2-D and 3-D meshes (ragged: some ranks hold no row), against the
// serial computation on the whole logits.
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "ops/ops_testing.hpp"
#include "shardwise/ops/vocabulary_cross_entropy.hpp"
#include "support/backends.hpp"

namespace {

using namespace shardwise;
using namespace shardwise::ops_testing;
using column = Eigen::VectorXd;

template <class Backend>
class vocabulary_cross_entropy_test : public ::testing::Test {};
TYPED_TEST_SUITE(vocabulary_cross_entropy_test, shardwise::testing::backends);

// Mean over tokens of log Σ_v exp(z_tv − m_t) + m_t − z_t,target, with z = h · tableᵀ and m_t the row's
// maximum, and its gradients times `scale`.
struct serial_cross_entropy {
  double loss = 0;
  matrix table_gradient;
  matrix hidden_gradient;

  serial_cross_entropy(const matrix& hidden, const matrix& table, const std::vector<std::int32_t>& targets,
                       double scale) {
    const matrix logits = hidden * table.transpose();
    const column maxima = logits.rowwise().maxCoeff();
    matrix probabilities = (logits.colwise() - maxima).array().exp().matrix();
    const column sums = probabilities.rowwise().sum();
    probabilities = (probabilities.array().colwise() / sums.array()).matrix();
    matrix logits_gradient = probabilities;
    for (Eigen::Index t = 0; t < logits.rows(); ++t) {
      loss += std::log(sums(t)) + maxima(t) - logits(t, targets[static_cast<std::size_t>(t)]);
      logits_gradient(t, targets[static_cast<std::size_t>(t)]) -= 1;
    }
    loss /= static_cast<double>(logits.rows());
    logits_gradient *= scale / static_cast<double>(logits.rows());
    table_gradient = logits_gradient.transpose() * hidden;
    hidden_gradient = logits_gradient * table;
  }
};

// The vocabulary's rows cut over every axis of a mesh of `Dimensions` dimensions.
template <std::size_t Dimensions>
using vocabulary_rows =
    std::conditional_t<Dimensions == 1, split<rows_over<0>, cols_over<>, ragged>,
                       std::conditional_t<Dimensions == 2, split<rows_over<0, 1>, cols_over<>, ragged>,
                                          split<rows_over<0, 1, 2>, cols_over<>, ragged>>>;

// The loss on every rank, the table's gradient added to what it held and the hidden states' gradient,
// for hidden states scaled by `spread`, against the serial computation.
template <class Backend>
void expect_serial(double spread) {
  Backend::run(
      [&](auto& world) {
        for_every_mesh(world, [&]<class Mesh>(Mesh& mesh) {
          using vocabulary_layout = vocabulary_rows<Mesh::dimensions>;
          SCOPED_TRACE("grid " + shape_string(mesh.shape()));
          for (const std::int64_t vocabulary : {2, 7, 19}) {
            SCOPED_TRACE("vocabulary " + std::to_string(vocabulary));
            const matrix hidden = spread * random_matrix({6, 5}, 31);
            const matrix table = random_matrix({vocabulary, 5}, 32);
            const matrix earlier_gradient = random_matrix({vocabulary, 5}, 33);
            std::vector<std::int32_t> targets;
            for (std::int32_t t = 0; t < 6; ++t) targets.push_back((5 * t + 1) % static_cast<std::int32_t>(vocabulary));
            const serial_cross_entropy expected(hidden, table, targets, 0.5);

            const auto table_tensor = distribute<vocabulary_layout>(mesh, table);
            auto table_gradient = distribute<vocabulary_layout>(mesh, earlier_gradient);
            std::optional<cross_entropy_saved<double, std::remove_cvref_t<decltype(mesh)>>> saved;
            const double loss = vocabulary_cross_entropy(distribute<replicated<>>(mesh, hidden), table_tensor,
                                                         std::span<const std::int32_t>(targets), saved);
            const double logit_size = 20 * spread;  // |h · tableᵀ| is at most 5 · 2 spread · 2
            EXPECT_NEAR(loss, expected.loss, 1e-12 * logit_size) << "the loss on rank " << world.rank();
            const auto hidden_gradient =
                vocabulary_cross_entropy_backward<replicated<>>(*saved, table_tensor, table_gradient, 0.5);
            expect_near(table_gradient, earlier_gradient + expected.table_gradient, 1e-12 * logit_size,
                        "table gradient");
            expect_near(hidden_gradient, expected.hidden_gradient, 1e-12 * logit_size, "hidden gradient");
          }
        });
      },
      rank_counts);
}

TYPED_TEST(vocabulary_cross_entropy_test, loss_and_gradients_match_the_serial_computation) {
  expect_serial<TypeParam>(1);
}

// Logits spanning thousands, beyond exp's range (709 in double): only a shift by each token's maximum
// over all its ranks keeps every exponential finite. Any shift the ranks agree on gives the same loss
// for logits as narrow as a model's at initialisation.
TYPED_TEST(vocabulary_cross_entropy_test, logits_wider_than_the_range_of_exp) { expect_serial<TypeParam>(300); }

}  // namespace
