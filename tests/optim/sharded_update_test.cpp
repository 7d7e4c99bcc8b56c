// The sharded weight update against the replicated one and both against a serial reference: for
// every optimizer, N replicas with N in {1, 2, 3, 4, 8}, parameters whose sizes N does not divide, and
// several steps of different gradients on every replica. The reference is computed on each rank in
// double from the textbook formulas, from every replica's gradients.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "shardwise/optim/adafactor.hpp"
#include "shardwise/optim/adam.hpp"
#include "shardwise/optim/adamw.hpp"
#include "shardwise/optim/flat_layout.hpp"
#include "shardwise/optim/lamb.hpp"
#include "shardwise/optim/lars.hpp"
#include "shardwise/optim/momentum.hpp"
#include "shardwise/optim/schedule.hpp"
#include "shardwise/optim/sgd.hpp"
#include "shardwise/optim/sharded.hpp"
#include "support/backends.hpp"
#include "support/counting_communicator.hpp"
#include "support/elements.hpp"

namespace {

using namespace shardwise;
using namespace shardwise::testing;
using optim::parameter_shape;

template <class Backend>
class sharded_update : public ::testing::Test {};
TYPED_TEST_SUITE(sharded_update, backends);

constexpr std::initializer_list<int> replica_counts = {1, 2, 3, 4, 8};
constexpr long steps = 4;

// 35 + 13 + 9097 = 9145 elements: no N > 1 here divides a tensor or the total. The long tensor spans
// several of the pieces the update hands the optimizer (4096 elements, sharded.hpp) and of Adam's
// blocks (1024, adam.hpp), with a partial one at the end.
const std::vector<parameter_shape> shapes = {{7, 5}, {1, 13}, {11, 827}};

// Replica `rank`'s gradient at `step`, in [-1, 1], different for every replica, step and element.
// Multiples of 1/1024, so every order of summing them over replicas gives the same float: where the
// sum is near zero, Adam's direction g/(|g| + ε) would otherwise depend on the order (partial
// sharding sums in another order than the reference). With λ = 0.01 and these weights, Adam's g + λ w
// is either 0 or at least 4.8e-6 (N ≤ 8), far from ε.
float gradient_value(int rank, long step, std::size_t tensor, std::size_t i) {
  std::uint32_t h = static_cast<std::uint32_t>(rank) * 0x9E3779B1u ^ static_cast<std::uint32_t>(step) * 0x85EBCA77u ^
                    static_cast<std::uint32_t>(tensor) * 0xC2B2AE3Du ^ static_cast<std::uint32_t>(i) * 0x27D4EB2Fu;
  h ^= h >> 15;
  h *= 0x2C1B3C6Du;
  h ^= h >> 12;
  return static_cast<float>(static_cast<int>(h % 2001u) - 1000) / 1024.0f;
}

// The 1 x 13 tensor starts at zero, as biases do, so that LAMB's and LARS's trust ratios meet a weight
// norm of zero at the first step.
float initial_weight(std::size_t tensor, std::size_t i) {
  if (tensor == 1) return 0.0f;
  return static_cast<float>(static_cast<int>((tensor * 7 + i * 13) % 41) - 20) / 16.0f;
}

std::vector<float> initial_weights(std::size_t tensor) {
  std::vector<float> w(shapes[tensor].size());
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = initial_weight(tensor, i);
  return w;
}

// The averaged gradient the update sees: replicas summed in rank order in float, then times 1/N.
std::vector<double> averaged_gradient(int replicas, long step, std::size_t tensor) {
  std::vector<double> g(shapes[tensor].size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    float sum = gradient_value(0, step, tensor, i);
    for (int r = 1; r < replicas; ++r) sum += gradient_value(r, step, tensor, i);
    g[i] = sum * (1.0f / static_cast<float>(replicas));
  }
  return g;
}

// ---- the serial reference, in double

struct reference_tensor {
  parameter_shape shape;
  std::vector<double> w;
  std::array<std::vector<double>, 2> state;  // moments, or velocity
  std::vector<double> row_factor, col_factor;
};

double sum_of_squares(const std::vector<double>& x) {
  double s = 0.0;
  for (const double v : x) s += v * v;
  return s;
}

void reference_step(const optim::sgd& o, reference_tensor& x, const std::vector<double>& g, long, double lr) {
  for (std::size_t i = 0; i < g.size(); ++i) x.w[i] -= lr * (g[i] + o.weight_decay * x.w[i]);
}

void reference_step(const optim::momentum& o, reference_tensor& x, const std::vector<double>& g, long, double lr) {
  auto& v = x.state[0];
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double gi = g[i] + o.weight_decay * x.w[i];
    v[i] = o.coefficient * v[i] + gi;
    x.w[i] -= lr * (o.nesterov ? gi + o.coefficient * v[i] : v[i]);
  }
}

// Adam's direction for every element, updating the moments; decoupled decay added when asked.
template <class Hyper>
std::vector<double> adam_directions(const Hyper& o, reference_tensor& x, const std::vector<double>& g, long t, bool l2,
                                    bool decoupled) {
  auto& m = x.state[0];
  auto& v = x.state[1];
  std::vector<double> d(g.size());
  const double c1 = 1.0 - std::pow(static_cast<double>(o.beta1), static_cast<double>(t));
  const double c2 = 1.0 - std::pow(static_cast<double>(o.beta2), static_cast<double>(t));
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double gi = l2 ? g[i] + o.weight_decay * x.w[i] : g[i];
    m[i] = o.beta1 * m[i] + (1.0 - o.beta1) * gi;
    v[i] = o.beta2 * v[i] + (1.0 - o.beta2) * gi * gi;
    d[i] = (m[i] / c1) / (std::sqrt(v[i] / c2) + o.epsilon) + (decoupled ? o.weight_decay * x.w[i] : 0.0);
  }
  return d;
}

void reference_step(const optim::adam& o, reference_tensor& x, const std::vector<double>& g, long t, double lr) {
  const auto d = adam_directions(o, x, g, t, true, false);
  for (std::size_t i = 0; i < g.size(); ++i) x.w[i] -= lr * d[i];
}

void reference_step(const optim::adamw& o, reference_tensor& x, const std::vector<double>& g, long t, double lr) {
  const auto d = adam_directions(o, x, g, t, false, true);
  for (std::size_t i = 0; i < g.size(); ++i) x.w[i] -= lr * d[i];
}

void reference_step(const optim::lamb& o, reference_tensor& x, const std::vector<double>& g, long t, double lr) {
  const auto d = adam_directions(o, x, g, t, false, true);
  const double wn = std::sqrt(sum_of_squares(x.w));
  const double dn = std::sqrt(sum_of_squares(d));
  const double ratio = wn > 0 && dn > 0 ? wn / dn : 1.0;
  for (std::size_t i = 0; i < g.size(); ++i) x.w[i] -= lr * ratio * d[i];
}

void reference_step(const optim::lars& o, reference_tensor& x, const std::vector<double>& g, long, double lr) {
  const double wn = std::sqrt(sum_of_squares(x.w));
  const double gn = std::sqrt(sum_of_squares(g));
  const double local = wn > 0 && gn > 0 ? o.trust_coefficient * wn / (gn + o.weight_decay * wn + o.epsilon) : 1.0;
  auto& v = x.state[0];
  for (std::size_t i = 0; i < g.size(); ++i) {
    v[i] = o.coefficient * v[i] + lr * local * (g[i] + o.weight_decay * x.w[i]);
    x.w[i] -= v[i];
  }
}

void reference_step(const optim::adafactor& o, reference_tensor& x, const std::vector<double>& g, long t, double lr) {
  const std::size_t rows = x.shape.rows, cols = x.shape.cols;
  const double n = static_cast<double>(g.size());
  const double beta2 = 1.0 - std::pow(static_cast<double>(t), -static_cast<double>(o.decay_rate));
  for (std::size_t r = 0; r < rows; ++r) {
    double mean = 0.0;
    for (std::size_t c = 0; c < cols; ++c) mean += g[r * cols + c] * g[r * cols + c] + o.epsilon1;
    x.row_factor[r] = beta2 * x.row_factor[r] + (1.0 - beta2) * mean / static_cast<double>(cols);
  }
  for (std::size_t c = 0; c < cols; ++c) {
    double mean = 0.0;
    for (std::size_t r = 0; r < rows; ++r) mean += g[r * cols + c] * g[r * cols + c] + o.epsilon1;
    x.col_factor[c] = beta2 * x.col_factor[c] + (1.0 - beta2) * mean / static_cast<double>(rows);
  }
  double row_mean = 0.0;
  for (const double f : x.row_factor) row_mean += f / static_cast<double>(rows);
  std::vector<double> u(g.size());
  for (std::size_t i = 0; i < g.size(); ++i)
    u[i] = g[i] / std::sqrt(x.row_factor[i / cols] * x.col_factor[i % cols] / row_mean);
  const double update_rms = std::sqrt(sum_of_squares(u) / n);
  const double weight_rms = std::sqrt(sum_of_squares(x.w) / n);
  const double alpha = (o.relative_step ? std::max(static_cast<double>(o.epsilon2), weight_rms) : 1.0) * lr;
  for (std::size_t i = 0; i < g.size(); ++i) x.w[i] -= alpha / std::max(1.0, update_rms / o.clip_threshold) * u[i];
}

template <class Optimizer>
std::vector<reference_tensor> reference_run(const Optimizer& o, int replicas, double lr) {
  std::vector<reference_tensor> tensors;
  for (std::size_t t = 0; t < shapes.size(); ++t) {
    const auto w = initial_weights(t);
    const std::size_t n = shapes[t].size();
    tensors.push_back({shapes[t],
                       {w.begin(), w.end()},
                       {std::vector<double>(n), std::vector<double>(n)},
                       std::vector<double>(shapes[t].rows),
                       std::vector<double>(shapes[t].cols)});
  }
  for (long step = 1; step <= steps; ++step)
    for (std::size_t t = 0; t < shapes.size(); ++t)
      reference_step(o, tensors[t], averaged_gradient(replicas, step, t), step, lr);
  return tensors;
}

// ---- comparisons

::testing::AssertionResult close_to(std::span<const float> actual, std::span<const double> expected, double tolerance) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure() << "sizes differ: " << actual.size() << " vs " << expected.size();
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double error = std::abs(static_cast<double>(actual[i]) - expected[i]);
    if (!(error <= tolerance * std::max(1.0, std::abs(expected[i]))))
      return ::testing::AssertionFailure() << "element " << i << " is " << actual[i] << ", expected " << expected[i]
                                           << " (error " << error << ", tolerance " << tolerance << ")";
  }
  return ::testing::AssertionSuccess();
}

std::vector<double> widened(std::span<const float> x) { return {x.begin(), x.end()}; }

// Every optimizer, with hyper-parameters that make each term matter, and the learning rate it runs at.
template <class F>
void for_each_optimizer(F&& f) {
  f("sgd", optim::sgd{.weight_decay = 0.01f}, 0.05f);
  f("momentum", optim::momentum{.coefficient = 0.9f, .nesterov = false, .weight_decay = 0.01f}, 0.05f);
  f("nesterov momentum", optim::momentum{.coefficient = 0.8f, .nesterov = true, .weight_decay = 0.01f}, 0.05f);
  f("adam", optim::adam{.weight_decay = 0.01f}, 0.02f);
  f("adamw", optim::adamw{.weight_decay = 0.05f}, 0.02f);
  f("lamb", optim::lamb{}, 0.02f);
  f("lars", optim::lars{.coefficient = 0.9f, .weight_decay = 0.01f, .trust_coefficient = 0.1f, .epsilon = 0.5f}, 0.5f);
  // A clip threshold d other than 1, below the updates' RMS, so that the clipping divides by d.
  f("adafactor", optim::adafactor{.clip_threshold = 0.5f}, 0.05f);
  // Steps of the learning rate itself, not scaled by the weights' RMS.
  f("adafactor, absolute steps", optim::adafactor{.relative_step = false}, 0.01f);
}

std::string what(const char* optimizer, int replicas, std::size_t bucket_elements, int rank) {
  std::ostringstream text;
  text << optimizer << ", N = " << replicas << ", bucket_elements = " << bucket_elements << ", rank " << rank;
  return text.str();
}

TYPED_TEST(sharded_update, equals_replicated_and_serial_reference_for_every_optimizer) {
  TypeParam::run(
      [](communicator auto& comm) {
        for_each_optimizer([&](const char* name, auto hyper, float learning_rate) {
          using O = decltype(hyper);
          // One bucket; and buckets of at most 40 elements: {7×5}, {13}, {11×827}, each padded.
          for (const std::size_t bucket_elements : {std::size_t{0}, std::size_t{40}}) {
            SCOPED_TRACE(what(name, comm.size(), bucket_elements, comm.rank()));
            const optim::update_options options{bucket_elements};
            optim::sharded_update<O> sharded(comm, shapes, hyper, options);
            optim::replicated_update<O> replicated(comm, shapes, hyper, options);
            for (std::size_t t = 0; t < shapes.size(); ++t) {
              sharded.set_weights(t, initial_weights(t));
              replicated.set_weights(t, initial_weights(t));
            }
            for (long step = 1; step <= steps; ++step) {
              for (std::size_t t = 0; t < shapes.size(); ++t) {
                for (std::size_t i = 0; i < shapes[t].size(); ++i) {
                  sharded.gradients(t)[i] = gradient_value(comm.rank(), step, t, i);
                  replicated.gradients(t)[i] = gradient_value(comm.rank(), step, t, i);
                }
              }
              sharded.step(comm, learning_rate);
              replicated.step(comm, learning_rate);
            }
            EXPECT_EQ(sharded.steps_done(), steps);

            const auto reference = reference_run(hyper, comm.size(), learning_rate);
            for (std::size_t t = 0; t < shapes.size(); ++t) {
              SCOPED_TRACE("tensor " + std::to_string(t));
              if (TypeParam::sums_in_rank_order) {
                EXPECT_TRUE(same_elements(sharded.weights(t), replicated.weights(t)));
              } else {
                EXPECT_TRUE(close_to(sharded.weights(t), widened(replicated.weights(t)), 1e-6));
              }
              EXPECT_TRUE(close_to(sharded.weights(t), reference[t].w, 1e-4));
              EXPECT_TRUE(close_to(replicated.weights(t), reference[t].w, 1e-4));
              for (std::size_t k = 0; k < optim::state_count<O>; ++k) {
                SCOPED_TRACE("state " + std::string(O::state_names[k]));
                const auto sharded_state = sharded.gather_state(comm, k, t);
                const auto replicated_state = replicated.gather_state(comm, k, t);
                if (TypeParam::sums_in_rank_order) {
                  EXPECT_TRUE(same_elements(sharded_state, replicated_state));
                } else {
                  EXPECT_TRUE(close_to(sharded_state, widened(replicated_state), 1e-6));
                }
                EXPECT_TRUE(close_to(sharded_state, reference[t].state[k], 1e-4));
              }
              if (TypeParam::sums_in_rank_order) {
                EXPECT_TRUE(same_elements(sharded.tensor_state(t), replicated.tensor_state(t)));
              } else {
                EXPECT_TRUE(close_to(sharded.tensor_state(t), widened(replicated.tensor_state(t)), 1e-6));
              }
            }
          }
        });
      },
      replica_counts);
}

// Shapes whose total 120 every N in {1, 2, 3, 4, 8} divides, so there is no padding.
const std::vector<parameter_shape> divisible_shapes = {{24, 4}, {1, 24}};

TYPED_TEST(sharded_update, adam_state_is_one_nth_of_replicated_and_total_is_at_most_8_plus_8_over_n_bytes) {
  TypeParam::run(
      [](communicator auto& comm) {
        const auto n = static_cast<std::size_t>(comm.size());
        SCOPED_TRACE("N = " + std::to_string(n));
        for (const auto& layout_shapes : {shapes, divisible_shapes}) {
          const optim::sharded_update<optim::adam> sharded(comm, layout_shapes);
          const optim::replicated_update<optim::adam> replicated(comm, layout_shapes);
          const auto s = sharded.memory();
          const auto r = replicated.memory();
          const auto& layout = sharded.layout();
          const std::size_t params = layout.parameter_elements();
          const std::size_t padding = layout.padded_elements() - params;
          EXPECT_LT(padding, n * layout.buckets().size());
          EXPECT_EQ(s.parameters, params);

          // Optimizer state: exactly 1/N of the replicated state (both padded alike), i.e. two float
          // moments per parameter over N, plus the padding.
          EXPECT_EQ(s.state_bytes * n, r.state_bytes);
          EXPECT_EQ(s.state_bytes, 2 * sizeof(float) * (params + padding) / n);
          EXPECT_EQ(r.state_bytes, 2 * sizeof(float) * (params + padding));
          // Full float32 weights and gradients stay resident (forward and backward need them).
          EXPECT_EQ(s.weight_bytes, sizeof(float) * (params + padding));
          EXPECT_EQ(s.gradient_bytes, sizeof(float) * (params + padding));
          EXPECT_EQ(s.master_weight_bytes + s.tensor_state_bytes + s.statistics_bytes, 0u);

          // 8 + 8/N bytes per element of the padded buffers; per parameter when N divides the total.
          const double bound = 8.0 + 8.0 / static_cast<double>(n);
          EXPECT_LE(static_cast<double>(s.total_bytes()), bound * static_cast<double>(params + padding));
          if (padding == 0) {
            EXPECT_LE(s.bytes_per_parameter(), bound);
          }
          EXPECT_EQ(r.total_bytes(), 16 * (params + padding));  // replicated Adam: 4 + 4 + 8 bytes
        }
      },
      replica_counts);
}

TYPED_TEST(sharded_update, adafactor_keeps_no_state_per_element_only_factors_per_tensor) {
  TypeParam::run(
      [](communicator auto& comm) {
        const optim::sharded_update<optim::adafactor> sharded(comm, shapes);
        const auto m = sharded.memory();
        EXPECT_EQ(m.state_bytes, 0u);
        // R, C and mean(R) of each tensor: (7 + 5 + 1) + (1 + 13 + 1) + (11 + 827 + 1) floats.
        EXPECT_EQ(m.tensor_state_bytes, sizeof(float) * (13 + 15 + 839));
      },
      replica_counts);
}

TYPED_TEST(sharded_update, a_communicator_of_another_size_is_an_argument_error_on_every_rank) {
  TypeParam::run(
      [](communicator auto& comm) {
        optim::sharded_update<optim::sgd> update(comm, shapes);
        auto half = comm.split(comm.rank() % 2, comm.rank());
        try {
          update.step(half, 0.1f);
          ADD_FAILURE() << "step on a communicator of " << half.size() << " ranks for " << comm.size()
                        << " replicas did not throw";
        } catch (const argument_error& e) {
          EXPECT_NE(std::string(e.what()).find("sharded_update::step"), std::string::npos) << e.what();
          EXPECT_NE(std::string(e.what()).find("of " + std::to_string(comm.size()) + " replicas"), std::string::npos)
              << e.what();
        }
        EXPECT_THROW((void)update.gradients(3), argument_error);
      },
      {2, 3, 4, 8});
}

// Many small tensors share a collective: per step, one reduce-scatter and one all-gather per bucket and
// one all-reduce per reduction round for the statistics of all tensors together.
TYPED_TEST(sharded_update, many_small_tensors_share_one_collective_per_bucket) {
  TypeParam::run(
      [](communicator auto& comm) {
        counting_communicator counted(comm.split(0, comm.rank()));
        std::vector<parameter_shape> many;
        for (std::size_t i = 0; i < 100; ++i) many.push_back({1, 1 + (i * 37) % 64});
        for (const std::size_t bucket_elements : {std::size_t{0}, std::size_t{256}}) {
          SCOPED_TRACE("N = " + std::to_string(comm.size()) + ", bucket_elements = " + std::to_string(bucket_elements));
          optim::sharded_update<optim::lamb> sharded(counted, many, {}, {bucket_elements});
          optim::replicated_update<optim::lamb> replicated(counted, many, {}, {bucket_elements});
          const auto& layout = sharded.layout();
          const int buckets = static_cast<int>(layout.buckets().size());
          if (bucket_elements == 0) {
            EXPECT_EQ(buckets, 1);
          }
          for (const auto& b : layout.buckets())
            EXPECT_TRUE(bucket_elements == 0 || b.elements <= bucket_elements || b.end_tensor - b.first_tensor == 1);

          constexpr int step_count = 3;
          counted.reset();
          for (int step = 1; step <= step_count; ++step) {
            for (std::size_t t = 0; t < many.size(); ++t)
              for (std::size_t i = 0; i < many[t].size(); ++i)
                sharded.gradients(t)[i] = gradient_value(comm.rank(), step, t, i);
            sharded.step(counted, 0.01f);
          }
          EXPECT_EQ(counted.calls("reduce_scatter"), step_count * buckets);
          EXPECT_EQ(counted.calls("all_gather"), step_count * buckets);
          EXPECT_EQ(counted.calls("all_reduce"), step_count * optim::reduction_rounds<optim::lamb>);
          EXPECT_EQ(counted.total_calls(), step_count * (2 * buckets + 1));

          counted.reset();
          for (int step = 1; step <= step_count; ++step) replicated.step(counted, 0.01f);
          EXPECT_EQ(counted.calls("all_reduce"), step_count * buckets);
          EXPECT_EQ(counted.total_calls(), step_count * buckets);
        }
      },
      replica_counts);
}

// Reductions started bucket by bucket as the gradients become final (gradients_ready, the last tensor
// first, as a backward pass produces them) give the weights of the step that reduces them all. Buckets of
// 50 elements hold tensors 0 and 1 together and tensor 2 alone: telling tensor 2 starts its bucket,
// telling tensor 1 starts nothing, and telling tensor 0 starts the other. In the last step tensor 0 is
// not told, and the step reduces its bucket itself.
TYPED_TEST(sharded_update, reductions_started_as_gradients_become_final_give_the_weights_of_one_step) {
  TypeParam::run(
      [](communicator auto& comm) {
        counting_communicator counted(comm.split(0, comm.rank()));
        const optim::update_options options{50};
        const auto train = [&](auto update, bool during_backward) {
          EXPECT_EQ(update.layout().buckets().size(), 2U);
          for (std::size_t t = 0; t < shapes.size(); ++t) update.set_weights(t, initial_weights(t));
          for (long step = 1; step <= steps; ++step) {
            counted.reset();
            for (std::size_t t = shapes.size(); t-- > 0;) {
              for (std::size_t i = 0; i < shapes[t].size(); ++i)
                update.gradients(t)[i] = gradient_value(comm.rank(), step, t, i);
              if (!during_backward || (t == 0 && step == steps)) continue;
              update.gradients_ready(counted, t, 1);
              EXPECT_EQ(counted.total_calls(), t == 2 ? 1 : t == 1 ? 1 : 2) << "reductions started, tensor " << t;
            }
            update.step(counted, 0.02f);
          }
          std::vector<std::vector<float>> weights;
          for (std::size_t t = 0; t < shapes.size(); ++t)
            weights.emplace_back(update.weights(t).begin(), update.weights(t).end());
          return weights;
        };
        const auto expect_equal = [&](const auto& during, const auto& after) {
          for (std::size_t t = 0; t < shapes.size(); ++t) {
            SCOPED_TRACE("tensor " + std::to_string(t));
            if (TypeParam::sums_in_rank_order) {
              EXPECT_TRUE(same_elements(during[t], after[t]));
            } else {
              EXPECT_TRUE(close_to(during[t], widened(after[t]), 1e-6));
            }
          }
        };
        SCOPED_TRACE("N = " + std::to_string(comm.size()) + ", rank " + std::to_string(comm.rank()));
        using sharded = optim::sharded_update<optim::adam>;
        using replicated = optim::replicated_update<optim::adam>;
        expect_equal(train(sharded(counted, shapes, {}, options), true),
                     train(sharded(counted, shapes, {}, options), false));
        expect_equal(train(replicated(counted, shapes, {}, options), true),
                     train(replicated(counted, shapes, {}, options), false));
        sharded update(counted, shapes, {}, options);
        EXPECT_THROW(update.gradients_ready(counted, 2, 2), argument_error);
      },
      replica_counts);
}

// The step of tensor-parallel pieces clips only when given a clip_norm: without one (0) it is the plain
// step, here on a tensor-parallel group of one rank.
TYPED_TEST(sharded_update, a_tensor_parallel_step_without_a_clip_norm_does_not_clip) {
  TypeParam::run(
      [](communicator auto& comm) {
        auto alone = comm.split(comm.rank(), 0);
        optim::sharded_update<optim::sgd> plain(comm, shapes);
        optim::sharded_update<optim::sgd> pieces(comm, shapes);
        for (std::size_t t = 0; t < shapes.size(); ++t) {
          plain.set_weights(t, initial_weights(t));
          pieces.set_weights(t, initial_weights(t));
          for (std::size_t i = 0; i < shapes[t].size(); ++i)
            plain.gradients(t)[i] = pieces.gradients(t)[i] = gradient_value(comm.rank(), 1, t, i);
        }
        plain.step(comm, 0.05f);
        // A braced learning rate alone is the step options' (a float would make `alone` the groups across).
        EXPECT_GT(pieces.step(comm, alone, {0.05f}).gradient_norm, 0.0);
        for (std::size_t t = 0; t < shapes.size(); ++t)
          EXPECT_TRUE(same_elements(pieces.weights(t), plain.weights(t))) << "tensor " << t;
      },
      replica_counts);
}

// bf16 weights gathered over float32 master weights: the master weights follow the float32 update
// exactly (the same gradients, the same arithmetic), the stored weights are them rounded to bf16, and
// the bytes per element are at most 6 + 12/N.
TYPED_TEST(sharded_update, bf16_weights_are_the_float32_master_weights_rounded) {
  TypeParam::run(
      [](communicator auto& comm) {
        const auto n = static_cast<std::size_t>(comm.size());
        optim::sharded_update<optim::adam, bf16> narrow(comm, shapes);
        optim::sharded_update<optim::adam> wide(comm, shapes);
        for (std::size_t t = 0; t < shapes.size(); ++t) {
          narrow.set_weights(t, initial_weights(t));
          wide.set_weights(t, initial_weights(t));
        }
        for (long step = 1; step <= steps; ++step) {
          for (std::size_t t = 0; t < shapes.size(); ++t)
            for (std::size_t i = 0; i < shapes[t].size(); ++i) {
              narrow.gradients(t)[i] = gradient_value(comm.rank(), step, t, i);
              wide.gradients(t)[i] = gradient_value(comm.rank(), step, t, i);
            }
          narrow.step(comm, 0.02f);
          wide.step(comm, 0.02f);
        }
        double largest_difference = 0.0;
        for (std::size_t t = 0; t < shapes.size(); ++t) {
          SCOPED_TRACE("tensor " + std::to_string(t) + ", N = " + std::to_string(n));
          const auto w = wide.weights(t);
          const auto b = narrow.weights(t);
          std::vector<bf16> rounded(w.begin(), w.end());
          EXPECT_TRUE(same_elements(std::span<const bf16>(b), std::span<const bf16>(rounded)));
          for (std::size_t i = 0; i < w.size(); ++i)
            largest_difference =
                std::max(largest_difference, std::abs(static_cast<double>(static_cast<float>(b[i])) - w[i]));
        }
        EXPECT_LE(largest_difference, 2.0 / 256.0);  // |w| < 2: half a bf16 ulp at most 2^-8

        const auto m = narrow.memory();
        const std::size_t padded = narrow.layout().padded_elements();
        EXPECT_EQ(m.weight_bytes, 2 * padded);
        EXPECT_EQ(m.master_weight_bytes, 4 * padded / n);
        EXPECT_LE(static_cast<double>(m.total_bytes()),
                  (6.0 + 12.0 / static_cast<double>(n)) * static_cast<double>(padded));
      },
      replica_counts);
}

// Partial sharding: the P replicas as P/S groups of S, sharded within each group, the blocks
// all-reduced across groups in one call per step. Agrees with the serial reference for every group size
// S dividing P (S = P is plain sharding, S = 1 replicates within groups of one).
TYPED_TEST(sharded_update, partial_sharding_in_groups_equals_the_serial_reference) {
  TypeParam::run(
      [](communicator auto& comm) {
        const int p = comm.size();
        for (int group_size = 1; group_size <= p; ++group_size) {
          if (p % group_size != 0) continue;
          counting_communicator group(comm.split(comm.rank() / group_size, comm.rank()));
          counting_communicator across(comm.split(comm.rank() % group_size, comm.rank()));
          for_each_optimizer([&](const char* name, auto hyper, float learning_rate) {
            using O = decltype(hyper);
            for (const std::size_t bucket_elements : {std::size_t{0}, std::size_t{40}}) {
              SCOPED_TRACE(what(name, p, bucket_elements, comm.rank()) + ", groups of " + std::to_string(group_size));
              optim::sharded_update<O> partial(group, shapes, hyper, {bucket_elements});
              for (std::size_t t = 0; t < shapes.size(); ++t) partial.set_weights(t, initial_weights(t));
              group.reset();
              across.reset();
              for (long step = 1; step <= steps; ++step) {
                for (std::size_t t = 0; t < shapes.size(); ++t)
                  for (std::size_t i = 0; i < shapes[t].size(); ++i)
                    partial.gradients(t)[i] = gradient_value(comm.rank(), step, t, i);
                partial.step(group, across, learning_rate);
              }
              const int buckets = static_cast<int>(partial.layout().buckets().size());
              EXPECT_EQ(group.calls("reduce_scatter"), steps * buckets);
              EXPECT_EQ(group.calls("all_gather"), steps * buckets);
              EXPECT_EQ(group.calls("all_reduce"), steps * optim::reduction_rounds<O>);
              EXPECT_EQ(across.total_calls(), steps);  // one all-reduce of all blocks per step
              EXPECT_EQ(across.calls("all_reduce"), steps);

              const auto reference = reference_run(hyper, p, learning_rate);
              for (std::size_t t = 0; t < shapes.size(); ++t) {
                SCOPED_TRACE("tensor " + std::to_string(t));
                EXPECT_TRUE(close_to(partial.weights(t), reference[t].w, 1e-4));
                for (std::size_t k = 0; k < optim::state_count<O>; ++k)
                  EXPECT_TRUE(close_to(partial.gather_state(group, k, t), reference[t].state[k], 1e-4));
              }
              EXPECT_EQ(partial.memory().state_bytes,
                        optim::state_count<O> * sizeof(float) * partial.layout().shard_elements());
            }
          });
        }
      },
      replica_counts);
}

// The accuracy effect of gathering bf16 weights: least squares min ‖A w − b‖² / M trained with sharded
// Adam, each replica's gradient computed from the weights the model reads (bf16 or float32), the
// update on float32 master weights. The float32 run reaches the noise floor; the bf16 run's final loss
// (read through bf16 weights) exceeds it by no more than rounding the weights to bf16 costs. The
// figures go to the test log.
TYPED_TEST(sharded_update, bf16_weight_gather_costs_little_accuracy_on_least_squares) {
  TypeParam::run(
      [](communicator auto& comm) {
        constexpr std::size_t rows = 512, dims = 32;
        std::vector<float> a(rows * dims), b(rows);
        for (std::size_t i = 0; i < rows; ++i) {
          double target = 0.0;
          for (std::size_t k = 0; k < dims; ++k) {
            a[i * dims + k] = gradient_value(7, 1, i, k);
            target += a[i * dims + k] * (static_cast<double>(k % 5) - 2.0) * 0.3;
          }
          b[i] = static_cast<float>(target + 0.01 * gradient_value(9, 2, i, 0));  // noise
        }
        const auto train = [&]<class Weight>(Weight) {
          optim::sharded_update<optim::adam, Weight> update(comm, {{1, dims}});
          update.set_weights(0, std::vector<float>(dims, 0.0f));
          const auto loss_and_gradient = [&](bool own_rows_only) {
            std::vector<float> w(dims);
            std::ranges::copy(update.weights(0), w.begin());  // what the model reads
            double loss = 0.0;
            std::vector<double> g(dims, 0.0);
            for (std::size_t i = 0; i < rows; ++i) {
              if (own_rows_only && static_cast<int>(i % static_cast<std::size_t>(comm.size())) != comm.rank()) continue;
              double residual = -b[i];
              for (std::size_t k = 0; k < dims; ++k) residual += static_cast<double>(a[i * dims + k]) * w[k];
              loss += residual * residual / rows;
              for (std::size_t k = 0; k < dims; ++k) g[k] += 2.0 * residual * a[i * dims + k] / rows;
            }
            return std::pair{loss, g};
          };
          for (long step = 1; step <= 300; ++step) {
            const auto g = loss_and_gradient(true).second;
            for (std::size_t k = 0; k < dims; ++k)
              update.gradients(0)[k] = static_cast<float>(g[k] * comm.size());  // the update averages
            update.step(comm, 0.02f);
          }
          return loss_and_gradient(false).first;
        };
        const double wide = train(float{});
        const double narrow = train(bf16{});
        if (comm.rank() == 0)
          std::printf("[ least squares ] N = %d: final loss float32 weights %.6g, bf16 weights %.6g (ratio %.4f)\n",
                      comm.size(), wide, narrow, narrow / wide);
        // The noise floor is 0.01² E[noise²] ≈ 3.3e-5. bf16 weights add the loss of rounding them: per
        // weight at most half an ulp, 2⁻⁹ for |w| < 1, so at most Σ_k E[a²] δ_k² = 32 · ⅓ · 2⁻¹⁸ ≈ 4.1e-5.
        EXPECT_LT(wide, 4e-5);
        EXPECT_LE(narrow - wide, 32.0 / 3.0 / 262144.0);
      },
      {1, 4});
}

// The packing itself, for many shapes, bucket sizes and N: the blocks of all replicas cover every
// element of every tensor exactly once, never a padding element, each replica's block fits its shard,
// and padding is below N per bucket.
TEST(flat_layout, blocks_cover_every_tensor_element_once_and_no_padding) {
  const std::vector<std::vector<parameter_shape>> models = {
      shapes, divisible_shapes, {{1, 1}}, {{5, 0}, {1, 3}}, {{1, 64}, {2, 2}, {9, 9}, {1, 1}, {1, 200}}};
  for (const auto& model : models)
    for (const int n : {1, 2, 3, 4, 5, 8, 16})
      for (const std::size_t bucket_elements : {std::size_t{0}, std::size_t{1}, std::size_t{50}, std::size_t{100}}) {
        SCOPED_TRACE("N = " + std::to_string(n) + ", bucket_elements = " + std::to_string(bucket_elements) +
                     ", tensors = " + std::to_string(model.size()));
        const optim::flat_layout layout(model, n, bucket_elements);
        std::vector<std::vector<int>> visits(model.size());
        for (std::size_t t = 0; t < model.size(); ++t) visits[t].assign(model[t].size(), 0);
        for (int r = 0; r < n; ++r) {
          for (const auto& run : layout.segments_of(r)) {
            ASSERT_LE(run.first + run.count, model[run.tensor].size());
            EXPECT_EQ(run.flat, layout.offset(run.tensor) + run.first);
            EXPECT_LE(run.local + run.count, layout.shard_elements());
            for (std::size_t i = 0; i < run.count; ++i) ++visits[run.tensor][run.first + i];
          }
        }
        for (std::size_t t = 0; t < model.size(); ++t)
          EXPECT_TRUE(std::ranges::all_of(visits[t], [](int v) { return v == 1; })) << "tensor " << t;
        std::size_t elements = 0;
        for (const auto& b : layout.buckets()) {
          EXPECT_EQ(b.padded % static_cast<std::size_t>(n), 0u);
          EXPECT_LT(b.padded - b.elements, static_cast<std::size_t>(n));
          elements += b.elements;
        }
        EXPECT_EQ(elements, layout.parameter_elements());
        EXPECT_EQ(layout.shard_elements() * static_cast<std::size_t>(n), layout.padded_elements());
      }
}

// Schedules are plain values: their rate at a step, against the formulas.
TEST(schedule, rates_follow_their_formulas) {
  EXPECT_EQ(optim::constant_rate{0.25f}(17), 0.25f);
  const optim::warmup_cosine cosine{.peak = 1.0f, .warmup_steps = 10, .total_steps = 110, .final_rate = 0.1f};
  EXPECT_FLOAT_EQ(cosine(5), 0.5f);
  EXPECT_FLOAT_EQ(cosine(10), 1.0f);
  EXPECT_FLOAT_EQ(cosine(60), 0.1f + 0.9f * 0.5f);  // half-way: cos(π/2) = 0
  EXPECT_FLOAT_EQ(cosine(110), 0.1f);
  EXPECT_FLOAT_EQ(cosine(500), 0.1f);
  const optim::warmup_cosine no_warm_up{.peak = 1.0f, .warmup_steps = 0, .total_steps = 100, .final_rate = 0.0f};
  EXPECT_FLOAT_EQ(no_warm_up(0), 1.0f);  // a loop counting from 0
  EXPECT_FLOAT_EQ(no_warm_up(50), 0.5f);
  const optim::inverse_square_root relative{.cap = 0.01f};
  EXPECT_FLOAT_EQ(relative(1), 0.01f);
  EXPECT_FLOAT_EQ(relative(40000), 0.005f);
}

}  // namespace
