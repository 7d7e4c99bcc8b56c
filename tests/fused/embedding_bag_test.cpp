// The embedding bag layer (fused/embedding_bag.hpp) on threads, MPI and simulated GPUs: its output (this
// rank's samples, every table side by side, a dtensor in the data-parallel layout) and the gradients of
// the table pieces each rank holds equal the serial layer's, in float (1e-5 relative) and double
// (1e-12), for tables cut table-wise and row-wise together, of different sizes and widths (one smaller
// than the ranks), sum and mean, bags that are empty or repeat an index, and a global batch that does not
// divide over the ranks; the fused and unfused paths give the same bits; every piece is named.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "shardwise/fused/embedding_bag.hpp"
#include "shardwise/mesh/data_parallel_mesh.hpp"
#include "support/backends.hpp"
#include "support/messages.hpp"
#include "support/relative_error.hpp"

namespace {

using namespace shardwise;
using shardwise::testing::message_of;
using shardwise::testing::relative_error;

template <class Backend>
class embedding_bag_layer : public ::testing::Test {};
TYPED_TEST_SUITE(embedding_bag_layer, shardwise::testing::backends);

template <class T>
using matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

const std::vector<fused::embedding_table> tables = {
    {7, 4, fused::table_sharding::table_wise},
    {50, 6, fused::table_sharding::row_wise},
    {3, 4, fused::table_sharding::table_wise},
    {5, 2, fused::table_sharding::row_wise},  // fewer rows than 8 ranks: some pieces are empty
    {11, 3, fused::table_sharding::table_wise},
};
constexpr std::int64_t batch = 13;
constexpr std::uint64_t seed = 5;

// Table t's bags of call `call`: 0 to 6 lookups, repeats likely.
struct bag_data {
  std::vector<std::int64_t> offsets{0}, indices;
};
bag_data bags_of(int t, int call) {
  bag_data bags;
  const auto rows = tables[static_cast<std::size_t>(t)].rows;
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t length = (b * 5 + t * 3 + call) % 7;
    for (std::int64_t i = 0; i < length; ++i) bags.indices.push_back((b * 13 + t * 5 + i * i * 17 + call) % rows);
    bags.offsets.push_back(static_cast<std::int64_t>(bags.indices.size()));
  }
  return bags;
}

template <class T>
matrix<T> whole_table(int t) {
  const auto& spec = tables[static_cast<std::size_t>(t)];
  matrix<T> table(spec.rows, spec.dimension);
  for (std::int64_t i = 0; i < spec.rows; ++i)
    for (int j = 0; j < spec.dimension; ++j) table(i, j) = fused::initial_embedding<T>(seed, t, spec.rows, i, j);
  return table;
}

std::int64_t column_of(int t) {
  std::int64_t column = 0;
  for (int k = 0; k < t; ++k) column += tables[static_cast<std::size_t>(k)].dimension;
  return column;
}

template <class T>
T output_gradient_at(std::int64_t row, std::int64_t column) {
  return static_cast<T>((row * 29 + column * 13) % 89) / T(83) - T(0.5);
}

template <class T, class Comm>
void expect_layer_equals_serial(Comm& comm, fused::pooling how) {
  const double tolerance = std::is_same_v<T, float> ? 1e-5 : 1e-12;
  data_parallel_mesh mesh(comm, comm.size(), {1});
  using local_mesh = std::remove_cvref_t<decltype(mesh.tensor_parallel())>;
  const auto layer_with = [&](fused::path path) {
    fused::embedding_options options;
    options.pooling = how;
    options.choice = options.backward_choice = path;
    options.slice_rows = 2;
    return std::make_unique<fused::embedding_bag<T, Comm, local_mesh>>(mesh.data(), mesh.tensor_parallel(), tables,
                                                                       batch, seed, options);
  };
  auto fused_layer = layer_with(fused::path::fused), baseline_layer = layer_with(fused::path::baseline);
  auto& layer = *fused_layer;
  const std::string what =
      std::string(how == fused::pooling::sum ? "sum" : "mean") + ", rank " + std::to_string(comm.rank());
  for (int call = 0; call < 2; ++call) {
    std::vector<bag_data> data;
    std::vector<fused::embedding_bags> bags;
    for (const int t : layer.input_tables()) data.push_back(bags_of(t, call));
    for (const auto& d : data) bags.push_back({d.offsets, d.indices});
    const auto out = layer.forward(bags);
    const auto unfused_out = baseline_layer->forward(bags);
    ASSERT_EQ(out.rows(), layer.rows()) << what;
    ASSERT_EQ(out.cols(), layer.width()) << what;
    EXPECT_EQ(std::memcmp(out.data().data(), unfused_out.data().data(), out.data().size_bytes()), 0)
        << what << ": fused and unfused outputs differ";
    // The serial output of this rank's samples, and the serial gradients of every table.
    matrix<T> expected(layer.rows(), layer.width());
    typename fused::embedding_bag<T, Comm, local_mesh>::output_type gradient(mesh.tensor_parallel(), out.extents());
    for (std::int64_t b = 0; b < layer.rows(); ++b)
      for (std::int64_t c = 0; c < layer.width(); ++c)
        gradient.local()(b, c) = output_gradient_at<T>(layer.first_row() + b, c);
    std::vector<matrix<T>> expected_gradients;
    for (int t = 0; t < static_cast<int>(tables.size()); ++t) {
      const auto table = whole_table<T>(t);
      const auto bag = bags_of(t, call);
      auto& g = expected_gradients.emplace_back(matrix<T>::Zero(table.rows(), table.cols()));
      for (std::int64_t b = 0; b < batch; ++b) {
        const auto begin = bag.offsets[static_cast<std::size_t>(b)], end = bag.offsets[static_cast<std::size_t>(b) + 1];
        const T divisor = how == fused::pooling::mean && end > begin ? static_cast<T>(end - begin) : T(1);
        Eigen::Matrix<T, 1, Eigen::Dynamic> pooled = Eigen::Matrix<T, 1, Eigen::Dynamic>::Zero(table.cols());
        for (auto i = begin; i < end; ++i) pooled += table.row(bag.indices[static_cast<std::size_t>(i)]);
        Eigen::Matrix<T, 1, Eigen::Dynamic> dy(table.cols());
        for (Eigen::Index j = 0; j < table.cols(); ++j) dy(j) = output_gradient_at<T>(b, column_of(t) + j);
        for (auto i = begin; i < end; ++i) g.row(bag.indices[static_cast<std::size_t>(i)]) += dy / divisor;
        if (b >= layer.first_row() && b < layer.first_row() + layer.rows())
          expected.block(b - layer.first_row(), column_of(t), 1, table.cols()) = pooled / divisor;
      }
    }
    EXPECT_LE(relative_error(out.local(), expected), tolerance) << what << ", call " << call;
    // Backward: each piece's touched rows against the serial gradient's rows; the paths bit for bit.
    layer.backward(gradient);
    baseline_layer->backward(gradient);
    EXPECT_THROW(layer.backward(gradient), argument_error) << what << ": a second backward of one forward";
    std::vector<nn::sparse_parameter<T>*> unfused_pieces;
    baseline_layer->for_each_sparse_parameter(
        [&](const std::string&, nn::sparse_parameter<T>& p) { unfused_pieces.push_back(&p); });
    std::size_t k = 0;
    std::set<std::string> names;
    layer.for_each_sparse_parameter([&](const std::string& name, nn::sparse_parameter<T>& p) {
      names.insert(name);
      const auto& g = p.gradient;
      const auto& other = unfused_pieces[k++]->gradient;
      ASSERT_EQ(std::vector<std::int64_t>(g.touched().begin(), g.touched().end()),
                std::vector<std::int64_t>(other.touched().begin(), other.touched().end()))
          << what << ", " << name;
      matrix<T> dense = matrix<T>::Zero(p.rows(), p.dimension());
      for (std::size_t i = 0; i < g.touched().size(); ++i) {
        EXPECT_EQ(std::memcmp(g.values(i).data(), other.values(i).data(), g.values(i).size_bytes()), 0)
            << what << ", " << name;
        for (Eigen::Index j = 0; j < dense.cols(); ++j)
          dense(g.touched()[i], j) = g.values(i)[static_cast<std::size_t>(j)];
      }
      const matrix<T> serial = expected_gradients[static_cast<std::size_t>(p.table)].middleRows(p.first_row, p.rows());
      EXPECT_LE(relative_error(dense, serial), tolerance) << what << ", " << name << ", call " << call;
      // The piece is named after its table and its values are the table's rows from first_row on.
      EXPECT_EQ(name, "tables." + std::to_string(p.table));
      EXPECT_EQ(p.table_rows, whole_table<T>(p.table).rows()) << name;
      EXPECT_EQ(p.value(), whole_table<T>(p.table).middleRows(p.first_row, p.rows())) << name;
      p.gradient.clear();
      unfused_pieces[k - 1]->gradient.clear();
    });
    EXPECT_EQ(k, unfused_pieces.size());
    EXPECT_EQ(names.size(), k) << "a rank holds one piece of a table at most";
  }
}

TYPED_TEST(embedding_bag_layer, equals_the_serial_layer_in_float) {
  TypeParam::run([](communicator auto& comm) {
    for (const auto how : {fused::pooling::sum, fused::pooling::mean}) expect_layer_equals_serial<float>(comm, how);
  });
}

TYPED_TEST(embedding_bag_layer, equals_the_serial_layer_in_double) {
  TypeParam::run([](communicator auto& comm) {
    for (const auto how : {fused::pooling::sum, fused::pooling::mean}) expect_layer_equals_serial<double>(comm, how);
  });
}

TYPED_TEST(embedding_bag_layer, every_rank_reads_the_tables_it_holds_a_piece_of) {
  TypeParam::run([](communicator auto& comm) {
    data_parallel_mesh mesh(comm, comm.size(), {1});
    using local_mesh = std::remove_cvref_t<decltype(mesh.tensor_parallel())>;
    fused::embedding_bag<float, std::remove_cvref_t<decltype(comm)>, local_mesh> layer(
        mesh.data(), mesh.tensor_parallel(), tables, batch, seed);
    // Row-wise tables on every rank; the three table-wise ones cut in runs over the ranks.
    const std::vector<int> inputs(layer.input_tables().begin(), layer.input_tables().end());
    EXPECT_TRUE(std::find(inputs.begin(), inputs.end(), 1) != inputs.end());
    EXPECT_TRUE(std::find(inputs.begin(), inputs.end(), 3) != inputs.end());
    int whole = 0;
    for (const int t : {0, 2, 4}) whole += std::find(inputs.begin(), inputs.end(), t) != inputs.end() ? 1 : 0;
    int everyone = whole;
    comm.all_reduce(std::span<int>(&everyone, 1));
    EXPECT_EQ(everyone, 3) << "each table-wise table is on exactly one rank";
    EXPECT_THROW((void)layer.forward({}), argument_error);
  });
}

// An index outside its table, or offsets that are not the batch's, are refused naming the table by its
// number in the layer's list (whole tables on some ranks, row-wise pieces on the others), on every
// rank before anything is exchanged: a forward with good bags then runs.
TYPED_TEST(embedding_bag_layer, a_bad_index_or_offsets_are_refused_naming_the_table) {
  TypeParam::run([](communicator auto& comm) {
    data_parallel_mesh mesh(comm, comm.size(), {1});
    using local_mesh = std::remove_cvref_t<decltype(mesh.tensor_parallel())>;
    fused::embedding_bag<float, std::remove_cvref_t<decltype(comm)>, local_mesh> layer(
        mesh.data(), mesh.tensor_parallel(), tables, batch, seed);
    std::vector<bag_data> data;
    for (const int t : layer.input_tables()) data.push_back(bags_of(t, 0));
    const auto bags = [&] {
      std::vector<fused::embedding_bags> given;
      for (const auto& d : data) given.push_back({d.offsets, d.indices});
      return given;
    };
    const std::string call = "[rank " + std::to_string(comm.world_rank()) + "] fused::embedding_bag::forward(";
    const int last = layer.input_tables().back();
    const auto rows = tables[static_cast<std::size_t>(last)].rows;
    auto& changed = data.back();
    std::size_t bag = 1;
    while (changed.offsets[bag + 1] == changed.offsets[bag]) ++bag;
    auto& first_lookup = changed.indices[static_cast<std::size_t>(changed.offsets[bag])];
    const auto kept = first_lookup;
    first_lookup = rows;
    const auto bad_index = message_of<argument_error>([&] { (void)layer.forward(bags()); });
    EXPECT_TRUE(bad_index.starts_with(call)) << bad_index;
    EXPECT_TRUE(bad_index.ends_with("): index " + std::to_string(rows) + " (table " + std::to_string(last) + ", bag " +
                                    std::to_string(bag) + ") is outside a table of " + std::to_string(rows) + " rows"))
        << bad_index;
    first_lookup = kept;
    changed.offsets.pop_back();
    const auto short_offsets = message_of<argument_error>([&] { (void)layer.forward(bags()); });
    EXPECT_TRUE(short_offsets.ends_with("): the offsets of table " + std::to_string(last) + " must be " +
                                        std::to_string(batch + 1) + " non-decreasing entries from 0 to at most the " +
                                        std::to_string(changed.indices.size()) + " indices"))
        << short_offsets;
    changed.offsets = bags_of(last, 0).offsets;
    EXPECT_EQ(layer.forward(bags()).rows(), layer.rows());
  });
}

}  // namespace
