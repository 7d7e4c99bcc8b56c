// The backward of the fused embedding-bag + all-to-all on every backend (threads, MPI, sim_gpu): the
// fused path (slices stored into the owner's buffer, put, or sent as messages, added as they arrive) and
// the baseline (pack, all_to_all_v, scatter-add) give the same table gradients bit for bit — the same
// rows touched in the same order, the same sums — and both equal the serial computation (float within
// 1e-5, double within 1e-12, relative), for tables of different widths and sizes, owners given
// explicitly (some ranks own none), empty bags and repeated indices, sum and mean (with a bag's length
// given apart from its lookups, as a table cut by rows has them), slices of one row to more than a rank's
// share, every way of sharing memory, and call after call with a rank that lags behind its peers.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "fused/embedding_data.hpp"
#include "shardwise/fused/embedding_all_to_all.hpp"
#include "shardwise/nn/sparse_parameter.hpp"
#include "shardwise/sim/sim_gpu.hpp"
#include "support/backends.hpp"
#include "support/messages.hpp"

namespace {

using namespace shardwise;
using shardwise::testing::bag_data;
using shardwise::testing::basic_embedding_matrix;
using shardwise::testing::message_of;

template <class Backend>
class fused_embedding_backward : public ::testing::Test {};
TYPED_TEST_SUITE(fused_embedding_backward, shardwise::testing::backends);

bool simulated(const auto& comm) { return std::same_as<std::remove_cvref_t<decltype(comm)>, sim_gpu::communicator>; }

struct configuration {
  int tables;
  int dimension;
  std::int64_t batch;
  std::vector<int> dimensions;
  bool owners_given;  // tables 0-1 on rank 0, the others two by two from the last rank down
  std::int64_t slice_rows;
  fused::pooling pooling;
  bool lengths_given;  // each bag's length for the mean: its lookups + (bag % 3)
};

const configuration configurations[] = {
    {11, 8, 37, {}, false, 3, fused::pooling::sum, false},
    {5, 4, 29, {4, 7, 1, 12, 3}, false, 70, fused::pooling::mean, false},
    {6, 5, 45, {5, 2, 9, 5, 3, 6}, true, 1, fused::pooling::mean, true},
    {4, 3, 300, {}, false, 1000, fused::pooling::sum, false},
    {1, 1, 1, {}, false, 1, fused::pooling::mean, false},
};

fused::embedding_shape shape_of(const configuration& c, int ranks) {
  fused::embedding_shape shape{c.tables, c.dimension, c.batch, c.dimensions};
  if (c.owners_given)
    for (int t = 0; t < c.tables; ++t)
      shape.owners.push_back(t < 2 ? 0 : std::max(0, ranks - 1 - (c.tables - 1 - t) / 2));
  return shape;
}

std::vector<std::int64_t> lengths_of(const bag_data& bags, bool given) {
  std::vector<std::int64_t> lengths;
  if (!given) return lengths;
  for (std::size_t b = 0; b + 1 < bags.offsets.size(); ++b)
    lengths.push_back(bags.offsets[b + 1] - bags.offsets[b] + static_cast<std::int64_t>(b % 3));
  return lengths;
}

// Two gradients, bit for bit: the same rows touched in the same order, the same values.
template <class T>
void expect_same_bits(const nn::sparse_rows<T>& a, const nn::sparse_rows<T>& b, const std::string& what) {
  ASSERT_EQ(std::vector<std::int64_t>(a.touched().begin(), a.touched().end()),
            std::vector<std::int64_t>(b.touched().begin(), b.touched().end()))
      << what;
  for (std::size_t k = 0; k < a.touched().size(); ++k)
    ASSERT_EQ(std::memcmp(a.values(k).data(), b.values(k).data(), a.values(k).size_bytes()), 0)
        << what << ": row " << a.touched()[k];
}

// A sparse gradient against the serial one: every touched row within `tolerance` (relative, over the
// whole table), every untouched row zero there.
template <class T>
void expect_serial(const nn::sparse_rows<T>& sparse, const basic_embedding_matrix<T>& serial, double tolerance,
                   const std::string& what) {
  basic_embedding_matrix<T> dense = basic_embedding_matrix<T>::Zero(serial.rows(), serial.cols());
  for (std::size_t k = 0; k < sparse.touched().size(); ++k)
    for (Eigen::Index j = 0; j < serial.cols(); ++j)
      dense(sparse.touched()[k], j) = sparse.values(k)[static_cast<std::size_t>(j)];
  for (Eigen::Index i = 0; i < serial.rows(); ++i)
    if (sparse.find(i) == nullptr) {
      EXPECT_TRUE(serial.row(i).isZero(0)) << what << ": row " << i << " untouched";
    }
  const double scale = std::max<double>(1e-300, static_cast<double>(serial.norm()));
  EXPECT_LE(static_cast<double>((dense - serial).norm()) / scale, tolerance) << what;
}

template <class T, class Comm>
void expect_backward_equals_serial(Comm& comm, const configuration& c, const fused::embedding_options& base,
                                   const std::string& how) {
  const double tolerance = std::is_same_v<T, float> ? 1e-5 : 1e-12;
  auto options = base;
  options.slice_rows = c.slice_rows;
  options.pooling = c.pooling;
  fused::embedding_all_to_all<Comm, T> op(comm, shape_of(c, comm.size()), options);
  const auto& plan = op.plan();
  const int r = comm.rank();
  for (int call = 0; call < 3; ++call) {
    const std::string what = std::to_string(c.tables) + " tables, batch " + std::to_string(c.batch) + ", slices of " +
                             std::to_string(c.slice_rows) + ", " + how + ", call " + std::to_string(call) + ", rank " +
                             std::to_string(r);
    const shardwise::testing::basic_rank_inputs<T> in(plan, r, call);
    std::vector<std::vector<std::int64_t>> lengths;
    auto bags = in.bag_spans;
    for (std::size_t k = 0; k < bags.size(); ++k) {
      lengths.push_back(lengths_of(in.bags[k], c.lengths_given));
      bags[k].lengths = lengths.back();
    }
    std::vector<T> gradient;
    for (std::int64_t row = plan.first_row(r); row < plan.first_row(r + 1); ++row)
      for (std::int64_t column = 0; column < plan.row_width(); ++column)
        gradient.push_back(shardwise::testing::output_gradient_at<T>(row, column, call));
    std::vector<nn::sparse_rows<T>> fused_gradients, baseline_gradients, chosen_gradients;
    for (const auto& table : in.tables)
      for (auto* list : {&fused_gradients, &baseline_gradients, &chosen_gradients})
        list->emplace_back(table.rows(), static_cast<int>(table.cols()));
    const auto pointers = [](std::vector<nn::sparse_rows<T>>& list) {
      std::vector<nn::sparse_rows<T>*> p;
      for (auto& g : list) p.push_back(&g);
      return p;
    };
    const auto fused_pointers = pointers(fused_gradients), baseline_pointers = pointers(baseline_gradients),
               chosen_pointers = pointers(chosen_gradients);
    op.fused_backward(std::span<const T>(gradient), bags, std::span<nn::sparse_rows<T>* const>(fused_pointers));
    // A rank that lags: its peers run on into the next call's stores meanwhile.
    if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    op.baseline_backward(std::span<const T>(gradient), bags, std::span<nn::sparse_rows<T>* const>(baseline_pointers));
    op.backward(std::span<const T>(gradient), bags, std::span<nn::sparse_rows<T>* const>(chosen_pointers));
    for (std::size_t k = 0; k < in.tables.size(); ++k) {
      const int t = plan.first_table(r) + static_cast<int>(k);
      const std::string table = what + ", table " + std::to_string(t);
      expect_same_bits(fused_gradients[k], baseline_gradients[k], table + ": fused against baseline");
      expect_same_bits(fused_gradients[k], chosen_gradients[k], table + ": backward() against fused");
      expect_serial(fused_gradients[k],
                    shardwise::testing::serial_table_gradient<T>(plan, t, in.tables[k].rows(), in.bags[k], c.pooling,
                                                                 call, lengths[k]),
                    tolerance, table);
    }
  }
}

// How the ranks share memory: all, none, or groups of 2 or 3 as if each were a node (sim_gpu: its own).
std::vector<std::pair<fused::embedding_options, std::string>> sharings(const auto& comm) {
  std::vector<std::pair<fused::embedding_options, std::string>> all{{{}, "in place"}};
  if (simulated(comm)) return all;
  all.emplace_back().second = "messages";
  all.back().first.share_memory = false;
  for (const int k : {2, 3}) {
    all.emplace_back().second = "nodes of " + std::to_string(k);
    all.back().first.ranks_per_node = k;
  }
  return all;
}

TYPED_TEST(fused_embedding_backward, fused_and_baseline_give_the_serial_table_gradients_in_float) {
  TypeParam::run([](communicator auto& comm) {
    for (const auto& [options, how] : sharings(comm))
      for (const auto& c : configurations) expect_backward_equals_serial<float>(comm, c, options, how);
  });
}

TYPED_TEST(fused_embedding_backward, and_in_double) {
  TypeParam::run(
      [](communicator auto& comm) {
        for (const auto& [options, how] : sharings(comm))
          for (const auto& c : {configurations[1], configurations[2]})
            expect_backward_equals_serial<double>(comm, c, options, how);
      },
      {1, 3, 8});
}

TYPED_TEST(fused_embedding_backward, a_gradient_of_the_wrong_size_or_width_is_refused) {
  TypeParam::run([](communicator auto& comm) {
    const fused::embedding_shape shape{comm.size(), 2, 4};  // one table of width 2 per rank
    fused::embedding_all_to_all op(comm, shape);
    const shardwise::testing::rank_inputs in(op.plan(), comm.rank(), 0);
    std::vector<float> gradient(static_cast<std::size_t>(op.plan().output_floats(comm.rank())));
    nn::sparse_rows<float> narrow(in.tables[0].rows(), 1), right(in.tables[0].rows(), 2);
    nn::sparse_rows<float>* narrow_one[] = {&narrow};
    nn::sparse_rows<float>* right_one[] = {&right};
    const std::span<nn::sparse_rows<float>* const> narrow_span(narrow_one), right_span(right_one);
    EXPECT_THROW(op.fused_backward(std::span<const float>(gradient), in.bag_spans, narrow_span), argument_error);
    gradient.push_back(0);
    EXPECT_THROW(op.baseline_backward(std::span<const float>(gradient), in.bag_spans, right_span), argument_error);
  });
}

TYPED_TEST(fused_embedding_backward, a_bag_looking_outside_its_table_is_refused_naming_the_table_and_bag) {
  TypeParam::run([](communicator auto& comm) {
    const fused::embedding_shape shape{comm.size(), 2, 4};  // one table of width 2 per rank
    fused::embedding_all_to_all op(comm, shape);
    const std::vector<float> gradient(static_cast<std::size_t>(op.plan().output_floats(comm.rank())));
    nn::sparse_rows<float> rows(5, 2);
    nn::sparse_rows<float>* one[] = {&rows};
    const std::vector<std::int64_t> offsets{0, 1, 2, 2, 3}, indices{4, 5, 0};  // bag 1 looks up row 5 of 5
    const fused::embedding_bags bags[] = {{offsets, indices}};
    EXPECT_EQ(message_of<argument_error>([&] {
                op.baseline_backward(std::span<const float>(gradient), bags,
                                     std::span<nn::sparse_rows<float>* const>(one));
              }),
              "[rank " + std::to_string(comm.world_rank()) +
                  "] embedding_all_to_all::backward: index 5 (table 0, bag 1) is outside a table of 5 rows");
  });
}

}  // namespace
