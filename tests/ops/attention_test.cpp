// Attention on distributed Q, K, V (ops/attention.hpp), on every backend: forward and backward equal
// a serial computation on the full matrices, written here with plain loops, for the 1-D, 2-D and 3-D
// layouts of a Transformer, causal and not; the serial backward matches finite differences; a block
// that cuts a sample or a head throws on every rank, naming the rule.
#include "shardwise/ops/attention.hpp"

#include <gtest/gtest.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>

#include "shardwise/layout/cube_3d.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/tensor/distribute.hpp"
#include "support/backends.hpp"

namespace {

using namespace shardwise;
using matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <class Backend>
class attention_test : public ::testing::Test {};
TYPED_TEST_SUITE(attention_test, shardwise::testing::backends);

// Smooth, distinct values per tensor (salt), so that a swapped operand or tile shows.
double input(int salt, std::int64_t i, std::int64_t j) {
  return std::sin(0.37 * static_cast<double>(i) + 0.91 * static_cast<double>(j) + 1.7 * salt);
}
matrix full(int salt, std::int64_t rows, std::int64_t cols) {
  matrix m(rows, cols);
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) m(i, j) = input(salt, i, j);
  return m;
}

struct serial_result {
  matrix out, dq, dk, dv;
};

// The serial reference, element by element: forward, then the backward of sum(O ∘ dO).
serial_result serial_attention(const matrix& q, const matrix& k, const matrix& v, const matrix& d_out,
                               const attention_shape& shape) {
  const std::int64_t n = shape.sequence;
  const std::int64_t d = shape.head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  serial_result r{matrix::Zero(q.rows(), q.cols()), matrix::Zero(q.rows(), q.cols()), matrix::Zero(q.rows(), q.cols()),
                  matrix::Zero(q.rows(), q.cols())};
  for (std::int64_t s = 0; s < q.rows(); s += n)
    for (std::int64_t h = 0; h < q.cols(); h += d) {
      matrix p(n, n);
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t visible = shape.causal ? i + 1 : n;
        double largest = -1e300;
        for (std::int64_t j = 0; j < visible; ++j) {
          double dot = 0;
          for (std::int64_t c = 0; c < d; ++c) dot += q(s + i, h + c) * k(s + j, h + c);
          p(i, j) = dot * scale;
          largest = std::max(largest, p(i, j));
        }
        double total = 0;
        for (std::int64_t j = 0; j < n; ++j) {
          p(i, j) = j < visible ? std::exp(p(i, j) - largest) : 0.0;
          total += p(i, j);
        }
        for (std::int64_t j = 0; j < n; ++j) p(i, j) /= total;
      }
      for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t c = 0; c < d; ++c)
          for (std::int64_t j = 0; j < n; ++j) {
            r.out(s + i, h + c) += p(i, j) * v(s + j, h + c);
            r.dv(s + j, h + c) += p(i, j) * d_out(s + i, h + c);
          }
      for (std::int64_t i = 0; i < n; ++i) {
        matrix d_p(1, n);
        double row_dot = 0;
        for (std::int64_t j = 0; j < n; ++j) {
          double dot = 0;
          for (std::int64_t c = 0; c < d; ++c) dot += d_out(s + i, h + c) * v(s + j, h + c);
          d_p(0, j) = dot;
          row_dot += dot * p(i, j);
        }
        for (std::int64_t j = 0; j < n; ++j) {
          const double d_s = p(i, j) * (d_p(0, j) - row_dot) * scale;
          for (std::int64_t c = 0; c < d; ++c) {
            r.dq(s + i, h + c) += d_s * k(s + j, h + c);
            r.dk(s + j, h + c) += d_s * q(s + i, h + c);
          }
        }
      }
    }
  return r;
}

void expect_near(const matrix& got, const matrix& expected, const std::string& what) {
  ASSERT_EQ(got.rows(), expected.rows()) << what;
  ASSERT_EQ(got.cols(), expected.cols()) << what;
  EXPECT_LT((got - expected).cwiseAbs().maxCoeff(), 1e-12) << what;
}

// Attention in Layout on `mesh` for `batch` samples and `heads` heads, against the serial reference.
template <class Layout, class Mesh>
void check_attention(Mesh& mesh, std::int64_t batch, std::int64_t heads, const attention_shape& shape) {
  SCOPED_TRACE("grid " + shape_string(mesh.shape()) + ", batch " + std::to_string(batch) + ", heads " +
               std::to_string(heads) + (shape.causal ? ", causal" : ""));
  const matrix_extents extents{batch * shape.sequence, heads * shape.head_dim};
  auto make = [&](int salt) {
    return from_function<Layout>(mesh, extents, [salt](auto i, auto j) { return input(salt, i, j); });
  };
  const auto q = make(0);
  const auto k = make(1);
  const auto v = make(2);
  const auto d_out = make(3);
  attention_saved<double> saved;
  const auto out = attention_forward(q, k, v, shape, saved);
  const auto grad = attention_backward(q, k, v, d_out, shape, saved);
  const auto expected =
      serial_attention(full(0, extents.rows, extents.cols), full(1, extents.rows, extents.cols),
                       full(2, extents.rows, extents.cols), full(3, extents.rows, extents.cols), shape);
  expect_near(all_gather(out), expected.out, "O");
  expect_near(all_gather(grad.q), expected.dq, "dQ");
  expect_near(all_gather(grad.k), expected.dk, "dK");
  expect_near(all_gather(grad.v), expected.dv, "dV");

  // Recomputing the probabilities in the backward pass keeps none and gives the same bits, which needs the
  // recomputed tile aligned as the kept one was.
  attention_saved<double> recomputing;
  const auto recomputed_out = attention_forward(q, k, v, shape, recomputing, attention_probabilities::recomputed);
  EXPECT_EQ(recomputing.probabilities.size(), 0U) << "probabilities kept";
  const auto recomputed = attention_backward(q, k, v, d_out, shape, recomputing);
  EXPECT_TRUE(all_gather(recomputed_out) == all_gather(out)) << "O, recomputing";
  EXPECT_TRUE(all_gather(recomputed.q) == all_gather(grad.q)) << "dQ, recomputing";
  EXPECT_TRUE(all_gather(recomputed.k) == all_gather(grad.k)) << "dK, recomputing";
  EXPECT_TRUE(all_gather(recomputed.v) == all_gather(grad.v)) << "dV, recomputing";
}

TYPED_TEST(attention_test, matches_serial_attention_in_1d_2d_and_3d) {
  TypeParam::run(
      [](communicator auto& world) {
        const int ranks = world.size();
        // Rows of 13 are longer than a vector of doubles (so the softmax runs vectorised), and tiles of
        // 13 x 13 start off the vector boundary in the buffer of kept probabilities.
        for (const auto& [sequence, causal] : {std::pair{5, false}, {5, true}, {13, true}}) {
          const attention_shape shape{.sequence = sequence, .head_dim = 3, .causal = causal};
          {  // 1-D: heads over the ranks, every sample everywhere
            process_mesh mesh(world, {ranks});
            check_attention<row_1d<>>(mesh, 3, 2 * ranks, shape);
          }
          if (ranks == 4 || ranks == 9) {  // 2-D: samples over grid rows, heads over grid columns
            const int q = ranks == 4 ? 2 : 3;
            process_mesh mesh(world, {q, q});
            check_attention<block_2d<>>(mesh, 2 * q, q, shape);
          }
          if (ranks == 4 || ranks == 8) {  // 3-D: the output layout, samples over (x, z), heads over y
            const int px = ranks == 8 ? 2 : 1;
            process_mesh mesh(world, {px, 2, 2});
            check_attention<cube_3d<>::output>(mesh, 2 * px * 2, 2 * 2, shape);
          }
        }
      },
      {1, 2, 3, 4, 8, 9});
}

TYPED_TEST(attention_test, a_block_that_cuts_a_sample_or_a_head_throws) {
  TypeParam::run(
      [](communicator auto& world) {
        process_mesh mesh(world, {world.size()});
        const attention_shape shape{.sequence = 4, .head_dim = 2, .causal = false};
        // Heads over the ranks: 3 heads of 2 columns do not split into whole heads over 2 ranks (6 / 2 = 3
        // columns each) — a head is cut.
        const auto t = from_function<row_1d<>>(mesh, {8, 6}, [](auto i, auto j) { return double(i + j); });
        attention_saved<double> saved;
        try {
          (void)attention_forward(t, t, t, shape, saved);
          FAIL() << "expected argument_error";
        } catch (const argument_error& e) {
          const std::string what = e.what();
          EXPECT_NE(what.find("[rank " + std::to_string(world.world_rank()) + "] attention_forward"), std::string::npos)
              << what;
          EXPECT_NE(what.find("cuts a head of 2 columns"), std::string::npos) << what;
        }
      },
      {2});
}

// A layout whose blocks differ: 6 columns over 4 ranks (ragged) give rank 0 and 1 two columns each, whole
// heads, and rank 2 and 3 one each. Every rank refuses, naming the same first block that cuts, so which
// rank a run reports does not change what it says.
TYPED_TEST(attention_test, every_rank_refuses_a_layout_whose_block_cuts_a_head_naming_that_block) {
  TypeParam::run(
      [](communicator auto& world) {
        process_mesh mesh(world, {world.size()});
        const attention_shape shape{.sequence = 4, .head_dim = 2, .causal = false};
        const auto t = from_function<split<rows_over<>, cols_over<0>, ragged>>(
            mesh, {8, 6}, [](auto i, auto j) { return double(i + j); });
        attention_saved<double> saved;
        try {
          (void)attention_forward(t, t, t, shape, saved);
          FAIL() << "expected argument_error";
        } catch (const argument_error& e) {
          const std::string reason(e.reason());
          EXPECT_NE(
              reason.find("rank 2's block of the tensor's group (rows 0..7, columns 4..4) cuts a head of 2 columns"),
              std::string::npos)
              << reason;
        }
      },
      {4});
}

// The serial reference's backward against central differences of its forward, for loss = sum(O ∘ R).
TEST(attention_serial_reference, backward_matches_finite_differences) {
  for (const bool causal : {false, true}) {
    const attention_shape shape{.sequence = 3, .head_dim = 2, .causal = causal};
    matrix q = full(0, 6, 4), k = full(1, 6, 4), v = full(2, 6, 4);
    const matrix r = full(3, 6, 4);
    const auto analytic = serial_attention(q, k, v, r, shape);
    auto loss = [&] { return serial_attention(q, k, v, r, shape).out.cwiseProduct(r).sum(); };
    const double h = 1e-6;
    for (auto [m, grad, name] :
         {std::tuple{&q, &analytic.dq, "dQ"}, std::tuple{&k, &analytic.dk, "dK"}, std::tuple{&v, &analytic.dv, "dV"}})
      for (std::int64_t i = 0; i < m->rows(); ++i)
        for (std::int64_t j = 0; j < m->cols(); ++j) {
          const double kept = (*m)(i, j);
          (*m)(i, j) = kept + h;
          const double up = loss();
          (*m)(i, j) = kept - h;
          const double down = loss();
          (*m)(i, j) = kept;
          EXPECT_NEAR((*grad)(i, j), (up - down) / (2 * h), 1e-7) << name << " (" << i << ", " << j << ")";
        }
  }
}

}  // namespace
