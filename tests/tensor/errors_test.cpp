// Errors in the user's terms. An error raised inside a public call names that call and its arguments
// first, then the step that failed, after one "[rank N] " prefix:
//
//   [rank 2] redistribute(row_1d<> → col_1d<>, 8x8): all_to_all_v: injected fault
//
// on every backend; and threads::run reports the rank that failed on its own, every time, while the
// ranks it stopped throw peer_error saying so ("stopped because rank 2 failed: …"). The threads::run tests
// compile in a source of their own (errors_threads_run_test.cpp; errors_checks.hpp).
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <cstdint>
#include <string>
#include <vector>

#include "shardwise/core/error.hpp"
#include "shardwise/layout/cube_3d.hpp"
#include "shardwise/layout/layout_name.hpp"
#include "shardwise/layout/split.hpp"
#include "shardwise/layout/vector_layout.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "shardwise/mesh/shape.hpp"
#include "shardwise/nn/binary_cross_entropy.hpp"
#include "shardwise/nn/embedding.hpp"
#include "shardwise/nn/family.hpp"
#include "shardwise/nn/linear.hpp"
#include "shardwise/ops/add_vector.hpp"
#include "shardwise/ops/collective_matmul.hpp"
#include "shardwise/ops/dropout.hpp"
#include "shardwise/ops/layer_norm.hpp"
#include "shardwise/ops/local_product.hpp"
#include "shardwise/ops/matmul.hpp"
#include "shardwise/optim/checkpoint.hpp"
#include "shardwise/optim/checkpoint_files.hpp"
#include "shardwise/optim/optimizer.hpp"
#include "shardwise/optim/sgd.hpp"
#include "shardwise/optim/sharded.hpp"
#include "shardwise/tensor/distribute.hpp"
#include "support/backends.hpp"
#include "tensor/errors_checks.hpp"

namespace {

using namespace shardwise;
using namespace shardwise::testing;

// Runs `call`, which must throw a shardwise::error (of type Error) whose message is
// "[rank <world_rank>] <starts_with>…" and names the rank once, and contains `detail`.
template <class Error = error, class Call>
void expect_error(int world_rank, Call&& call, const std::string& starts_with, const std::string& detail) {
  try {
    call();
    ADD_FAILURE() << starts_with << " did not throw";
  } catch (const Error& e) {
    const std::string what = e.what();
    const std::string prefix = "[rank " + std::to_string(world_rank) + "] ";
    EXPECT_EQ(what.rfind(prefix + starts_with, 0), 0U) << what;
    EXPECT_EQ(what.find("[rank", prefix.size()), std::string::npos) << "a second rank prefix in: " << what;
    EXPECT_EQ(what.find("[no rank]"), std::string::npos) << what;
    EXPECT_NE(what.find(detail), std::string::npos) << "no \"" << detail << "\" in: " << what;
    EXPECT_EQ(e.rank(), world_rank);
  }
}

template <class Backend>
class errors_test : public ::testing::Test {};
TYPED_TEST_SUITE(errors_test, backends);

// Errors every rank raises alike (a shape, a root, a communicator that does not fit), so that every
// backend, MPI included, carries on afterwards.
TYPED_TEST(errors_test, each_entry_point_names_its_call_and_arguments_first) {
  TypeParam::run(
      [](communicator auto& world) {
        const int me = world.world_rank();
        const int p = world.size();
        const std::string ranks = std::to_string(p);
        process_mesh line(world, {p});
        const auto t = from_function<row_1d<>>(line, {7, 2 * p}, value);
        const std::string shape = "7x" + std::to_string(2 * p);

        // A layout that cannot cut the shape: the error of the new layout's mapping, in redistribute's terms.
        expect_error<argument_error>(
            me, [&] { (void)redistribute<col_1d<>>(t); }, "redistribute(row_1d<> → col_1d<>, " + shape + "): layout: ",
            "7 rows do not split into " + ranks + " equal parts");
        // A root that is no rank: the step is the call itself, so it is named once.
        expect_error<argument_error>(
            me, [&] { (void)gather(t, p); }, "gather(row_1d<> " + shape + ", root " + ranks + "): root " + ranks,
            "is not a rank");
        const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> whole =
            Eigen::MatrixXd::Constant(4, 4, 1.0);
        expect_error<argument_error>(
            me, [&] { (void)scatter<col_1d<ragged>>(line, whole, -1); }, "scatter<col_1d<ragged>>(root -1): root -1",
            "is not a rank");

        // Products whose operands do not fit, and options that do not.
        const auto x = from_function<col_1d<padded>>(line, {6, 5}, value);
        const auto w = from_function<row_1d<padded>>(line, {4, 3}, value);
        expect_error<argument_error>(
            me, [&] { (void)all_gather_matmul(x, w); },
            "all_gather_matmul(col_1d<padded> 6x5, row_1d<padded> 4x3): ", "the inner dimensions 5 and 4 differ");
        process_mesh cube(world, balanced_shape<3>(p));
        using cube_layouts = cube_3d<directions<>, padded>;
        const auto a = from_function<cube_layouts::input>(cube, {6, 5}, value);
        const auto b = from_function<cube_layouts::weight>(cube, {5, 3}, value);
        expect_error<argument_error>(
            me, [&] { (void)matmul(a, b, {.chunks = 0}); },
            "matmul(cube_3d<directions<>, padded>::input 6x5, cube_3d<directions<>, padded>::weight 5x3, chunks 0): ",
            "chunks is 0");
        const auto c = from_function<cube_layouts::output>(cube, {7, 3}, value);
        expect_error<argument_error>(
            me, [&] { (void)matmul(transposed(a), c); },
            "matmul(transposed(cube_3d<directions<>, padded>::input 6x5), cube_3d<directions<>, padded>::output 7x3): ",
            "the inner dimensions 6 and 7 differ");

        // The element-wise and row-wise operators, called directly.
        using vector_layout = vector_layout_t<row_1d<padded>>;
        const auto rows = from_function<row_1d<padded>>(line, {7, 2 * p}, value);
        const auto long_vector = from_function<vector_layout>(line, {1, 2 * p + 1}, value);
        expect_error<argument_error>(
            me, [&] { (void)add_vector(rows, long_vector); },
            "add_vector(row_1d<padded> " + shape + ", " + layout_name<vector_layout>() + " 1x" +
                std::to_string(2 * p + 1) + "): the vector is 1x" + std::to_string(2 * p + 1),
            "needs a 1x" + std::to_string(2 * p) + " vector");
        const auto gamma = from_function<vector_layout>(line, {1, 2 * p}, value);
        expect_error<argument_error>(
            me, [&] { (void)layer_norm(rows, gamma, gamma, -1.0); }, "layer_norm(row_1d<padded> " + shape + ", ",
            "epsilon -1.000000 must be positive");
        expect_error<argument_error>(
            me, [&] { (void)dropout(t, 1.5, 7); }, "dropout(row_1d<> " + shape + "): rate 1.500000", "outside [0, 1)");

        // A layer's misuse, and an update stepped on a communicator it was not built for.
        nn::linear<double, col_1d<padded>, row_1d<padded>, decltype(line)> layer(line, 5, 3, 1);
        const auto gradient = from_function<row_1d<padded>>(line, {6, 3}, value);
        const auto no_forward = "nn::linear::backward(row_1d<padded> 6x3): backward without a forward before it";
        expect_error<argument_error>(me, [&] { (void)layer.backward(gradient); }, no_forward, "keeps its input");
        // The backward gives up the input it used: a second one has none.
        (void)layer.forward(x);
        (void)layer.backward(gradient);
        expect_error<argument_error>(
            me, [&] { (void)layer.backward(gradient); }, no_forward, "until the backward that uses it");
        // The same for the input embedding, which keeps the tokens it looked up.
        nn::embedding<double, nn::tensor_parallel_1d<>, decltype(line)> embedding(line, 4 * p, 4, 3, 1);
        const auto embedded = from_function<replicated<>>(line, {8, 3}, value);
        const auto no_tokens = "nn::embedding::backward(replicated<> 8x3): backward without a forward before it";
        expect_error<argument_error>(me, [&] { embedding.backward(embedded); }, no_tokens, "keeps its tokens");
        const std::vector<std::int32_t> tokens{0, 1, 2, 3, 3, 2, 1, 0};
        (void)embedding.forward(tokens, 4);
        embedding.backward(embedded);
        expect_error<argument_error>(
            me, [&] { embedding.backward(embedded); }, no_tokens, "until the backward that uses it");
        // The loss, which keeps its probabilities: a second backward names the rank of the forward.
        nn::binary_cross_entropy<double, col_1d<>, decltype(line)> loss;
        const auto logits = from_function<col_1d<>>(line, {2 * p, 1}, value);
        const std::vector<double> labels{0.0, 1.0};
        (void)loss.forward(logits, labels);
        (void)loss.backward(1.0);
        expect_error<argument_error>(
            me, [&] { (void)loss.backward(1.0); },
            "nn::binary_cross_entropy::backward(): backward without a forward before it", "keeps its probabilities");
        optim::sharded_update<optim::sgd> update(world, std::vector<optim::parameter_shape>{{3, 4}});
        auto half = world.split(world.rank() % 2, world.rank());
        expect_error<argument_error>(
            me, [&] { update.step(half, 0.5f); },
            "sharded_update::step(rank " + std::to_string(half.rank()) + " of " + std::to_string(half.size()) +
                ", learning rate 0.5): built for rank " + std::to_string(world.rank()) + " of " + ranks + " replicas",
            "");
        // A checkpoint no rank can write (no folder can be made in /proc): rank 0's own error, and on the
        // others the news that rank 0 failed, each with its rank once.
        expect_error<optim::checkpoint_error>(
            me, [&] { optim::save_checkpoint(world, update, "/proc"); },
            world.rank() == 0 ? "save_checkpoint(/proc): /proc/step-0.tmp: No such file or directory"
                              : "save_checkpoint(/proc): rank 0 could not create /proc/step-0.tmp",
            "");
      },
      {2, 3, 4});
}

}  // namespace
