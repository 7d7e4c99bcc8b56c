// process_mesh on every 1-D, 2-D and 3-D grid that P ranks allow, for every backend: the rank order
// (coords, rank_of and all_coords agree with row-major, last axis fastest), the axis communicators
// (sizes, ranks, members, reductions against serial sums), and the errors of grids that do not fit.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "shardwise/mesh/all_coords.hpp"
#include "shardwise/mesh/data_parallel_mesh.hpp"
#include "shardwise/mesh/process_mesh.hpp"
#include "support/backends.hpp"

namespace {

using namespace shardwise;

constexpr std::initializer_list<int> rank_counts = {1, 2, 3, 4, 6, 8, 12};

template <class Backend>
class mesh_test : public ::testing::Test {};
TYPED_TEST_SUITE(mesh_test, shardwise::testing::backends);

// check(shape) for every 1-D, 2-D and 3-D grid of `ranks` ranks.
template <class Check>
void for_each_shape(int ranks, Check&& check) {
  for (const auto& shape : grid_shapes<1>(ranks)) check(shape);
  for (const auto& shape : grid_shapes<2>(ranks)) check(shape);
  for (const auto& shape : grid_shapes<3>(ranks)) check(shape);
}

template <std::size_t D>
std::string trace(const coordinates<D>& shape, int rank) {
  return "grid " + shape_string(shape) + ", rank " + std::to_string(rank);
}

// The rank of `point` written out independently of process_mesh: sum of point[a] * stride[a], with
// stride 1 on the last axis.
template <std::size_t D>
int row_major_rank(const coordinates<D>& shape, const coordinates<D>& point) {
  int rank = 0;
  int stride = 1;
  for (std::size_t a = D; a-- > 0;) {
    rank += point[a] * stride;
    stride *= shape[a];
  }
  return rank;
}

// Calls f, which must throw mesh_error from this rank whose message holds every one of `parts`.
template <class F>
void expect_mesh_error(int world_rank, F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no mesh_error; expected one mentioning " << *parts.begin();
  } catch (const mesh_error& e) {
    const std::string text = e.what();
    EXPECT_EQ(e.rank(), world_rank) << text;
    EXPECT_EQ(text.rfind("[rank " + std::to_string(world_rank) + "] ", 0), 0U) << text;
    for (const auto& part : parts) EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' in: " << text;
  }
}

// ---- shapes, serially

TEST(grid_shapes, are_every_factorisation_in_lexicographic_order) {
  for (int ranks = 1; ranks <= 36; ++ranks) {
    std::vector<coordinates<3>> expected;
    for (int a = 1; a <= ranks; ++a)
      for (int b = 1; b <= ranks; ++b)
        for (int c = 1; c <= ranks; ++c)
          if (a * b * c == ranks) expected.push_back({a, b, c});
    EXPECT_EQ(grid_shapes<3>(ranks), expected) << ranks << " ranks";

    std::vector<coordinates<2>> expected_2d;
    for (int a = 1; a <= ranks; ++a)
      if (ranks % a == 0) expected_2d.push_back({a, ranks / a});
    EXPECT_EQ(grid_shapes<2>(ranks), expected_2d) << ranks << " ranks";
    EXPECT_EQ(grid_shapes<1>(ranks), (std::vector<coordinates<1>>{{ranks}}));
  }
  EXPECT_TRUE(grid_shapes<3>(0).empty());
}

TEST(balanced_shape, is_the_most_nearly_cubic_grid_largest_extent_first) {
  EXPECT_EQ(balanced_shape<3>(1), (coordinates<3>{1, 1, 1}));
  EXPECT_EQ(balanced_shape<3>(8), (coordinates<3>{2, 2, 2}));
  EXPECT_EQ(balanced_shape<3>(12), (coordinates<3>{3, 2, 2}));
  EXPECT_EQ(balanced_shape<3>(16), (coordinates<3>{4, 2, 2}));
  EXPECT_EQ(balanced_shape<3>(36), (coordinates<3>{4, 3, 3}));
  EXPECT_EQ(balanced_shape<3>(7), (coordinates<3>{7, 1, 1}));
  EXPECT_EQ(balanced_shape<2>(12), (coordinates<2>{4, 3}));
  EXPECT_EQ(balanced_shape<1>(6), (coordinates<1>{6}));
  EXPECT_THROW((void)balanced_shape<3>(0), mesh_error);
}

TEST(all_coords, of_a_shape_with_a_zero_extent_is_empty_and_a_negative_extent_throws) {
  EXPECT_EQ(ranges::size(all_coords(coordinates<2>{3, 0})), 0U);
  EXPECT_THROW((void)all_coords(coordinates<2>{3, -1}), mesh_error);
}

// ---- meshes over every backend

TYPED_TEST(mesh_test, rank_order_is_row_major_last_axis_fastest) {
  TypeParam::run(
      [](communicator auto& world) {
        const int ranks = world.size();
        for_each_shape(ranks, [&](const auto& shape) {
          SCOPED_TRACE(trace(shape, world.rank()));
          process_mesh mesh(world, shape);
          EXPECT_EQ(mesh.shape(), shape);
          EXPECT_EQ(mesh.coords(), mesh.coords(world.rank()));
          for (int rank = 0; rank < ranks; ++rank) {
            const auto point = mesh.coords(rank);
            EXPECT_EQ(row_major_rank(shape, point), rank) << detail::coords_string(point);
            EXPECT_EQ(mesh.rank_of(point), rank) << detail::coords_string(point);
          }
          // all_coords: every point once, in rank order (cartesian_product, not coords(rank), builds it).
          int expected_rank = 0;
          for (const auto& point : all_coords(mesh)) {
            EXPECT_EQ(row_major_rank(shape, point), expected_rank) << detail::coords_string(point);
            ++expected_rank;
          }
          EXPECT_EQ(expected_rank, ranks);
          EXPECT_EQ(static_cast<int>(ranges::size(all_coords(mesh))), ranks);
        });
      },
      rank_counts);
}

TYPED_TEST(mesh_test, each_axis_holds_the_ranks_that_share_the_other_coordinates) {
  TypeParam::run(
      [](communicator auto& world) {
        const int ranks = world.size();
        for_each_shape(ranks, [&](const auto& shape) {
          SCOPED_TRACE(trace(shape, world.rank()));
          process_mesh mesh(world, shape);
          const auto mine = mesh.coords();
          constexpr std::size_t dimensions = std::tuple_size_v<std::remove_cvref_t<decltype(shape)>>;
          for (std::size_t a = 0; a < dimensions; ++a) {
            SCOPED_TRACE("axis " + std::to_string(a));
            auto& line = mesh.axis(static_cast<int>(a));
            EXPECT_EQ(line.size(), shape[a]);
            EXPECT_EQ(line.rank(), mine[a]);

            // Members, in order: member t sits at my coordinates with coordinate a set to t.
            std::vector<int> members(static_cast<std::size_t>(line.size()));
            line.all_gather(std::array{world.rank()}, members);
            for (int t = 0; t < line.size(); ++t) {
              auto point = mine;
              point[a] = t;
              EXPECT_EQ(members[static_cast<std::size_t>(t)], row_major_rank(shape, point)) << "member " << t;
            }

            // A sum along the axis equals the serial sum over the ranks that agree with me off axis a.
            std::array<std::int64_t, 1> sum{world.rank()};
            line.all_reduce(sum, op::sum);
            std::int64_t expected = 0;
            for (int rank = 0; rank < ranks; ++rank) {
              auto point = mesh.coords(rank);
              point[a] = mine[a];
              if (point == mine) expected += rank;
            }
            EXPECT_EQ(sum[0], expected);
          }
          if constexpr (dimensions == 3) {
            EXPECT_EQ(&mesh.x(), &mesh.axis(0));
            EXPECT_EQ(&mesh.y(), &mesh.axis(1));
            EXPECT_EQ(&mesh.z(), &mesh.axis(2));
          }
          if constexpr (dimensions == 2) {
            EXPECT_EQ(&mesh.column(), &mesh.axis(0));  // varies the row index
            EXPECT_EQ(&mesh.row(), &mesh.axis(1));     // varies the column index
          }
          EXPECT_EQ(&mesh.world(), &world);
        });
      },
      rank_counts);
}

TYPED_TEST(mesh_test, the_paper_cube_names_x_y_z_after_i_j_l) {
  TypeParam::run(
      [](communicator auto& world) {
        process_mesh mesh(world, {2, 2, 2});
        const auto [i, j, l] = mesh.coords();
        EXPECT_EQ(world.rank(), 4 * i + 2 * j + l);
        EXPECT_EQ(mesh.x().rank(), i);
        EXPECT_EQ(mesh.y().rank(), j);
        EXPECT_EQ(mesh.z().rank(), l);
      },
      {8});
}

TYPED_TEST(mesh_test, grids_that_do_not_fit_throw_on_every_rank) {
  TypeParam::run(
      [](communicator auto& world) {
        const int ranks = world.size();
        const std::string size = std::to_string(ranks);
        const int me = world.world_rank();
        const coordinates<3> wrong_3d = ranks == 12 ? coordinates<3>{2, 2, 2} : coordinates<3>{2, 2, 3};
        const std::string wrong_3d_text = ranks == 12 ? "2x2x2" : "2x2x3";
        expect_mesh_error(me, [&] { process_mesh mesh(world, wrong_3d); },
                          {"process_mesh", wrong_3d_text, "communicator has " + size});
        expect_mesh_error(me, [&] { process_mesh mesh(world, {ranks + 1}); },
                          {std::to_string(ranks + 1), "communicator has " + size});
        expect_mesh_error(me, [&] { process_mesh mesh(world, {0, ranks}); },
                          {"0x" + size, "non-positive", "communicator has " + size + " ranks"});
        expect_mesh_error(me, [&] { process_mesh mesh(world, {-1, -ranks}); },
                          {"-1x-" + size, "non-positive", "communicator has " + size + " ranks"});
        expect_mesh_error(me, [&] { process_mesh mesh(world, {ranks, 65536, 65536}); },
                          {"more than 2147483647 ranks", "communicator has " + size});
        if (ranks > 1) {
          const coordinates<2> asked = world.rank() == 0 ? coordinates<2>{1, ranks} : coordinates<2>{ranks, 1};
          expect_mesh_error(me, [&] { process_mesh mesh(world, asked); },
                            {"disagree", shape_string(asked), "communicator has " + size + " ranks"});
        }
        // Every rank threw at the same point, so the communicator is still in step.
        process_mesh mesh(world, {ranks});
        std::array<int, 1> one{1};
        mesh.axis(0).all_reduce(one, op::sum);
        EXPECT_EQ(one[0], ranks);
      },
      rank_counts);
}

TYPED_TEST(mesh_test, coordinates_ranks_and_axes_outside_the_grid_throw) {
  TypeParam::run(
      [](communicator auto& world) {
        const int ranks = world.size();
        const int me = world.world_rank();
        process_mesh mesh(world, {1, ranks, 1});
        const std::string grid = "1x" + std::to_string(ranks) + "x1";
        expect_mesh_error(me, [&] { (void)mesh.coords(-1); }, {"process_mesh::coords", "rank -1", grid});
        expect_mesh_error(me, [&] { (void)mesh.coords(ranks); }, {"rank " + std::to_string(ranks), grid});
        expect_mesh_error(me, [&] { (void)mesh.rank_of({0, ranks, 0}); }, {"process_mesh::rank_of", grid, "axis 1"});
        expect_mesh_error(me, [&] { (void)mesh.rank_of({0, 0, -1}); }, {"(0, 0, -1)", grid, "axis 2"});
        expect_mesh_error(me, [&] { (void)mesh.axis(3); }, {"process_mesh::axis", "axis 3", grid});
        expect_mesh_error(me, [&] { (void)mesh.axis(-1); }, {"axis -1", grid});
      },
      rank_counts);
}

// The mesh borrows its communicator: several meshes share one, and a mesh can be moved.
TYPED_TEST(mesh_test, meshes_share_a_communicator_and_move) {
  TypeParam::run(
      [](communicator auto& world) {
        const int ranks = world.size();
        auto make_columns = [&] { return process_mesh(world, {ranks, 1}); };
        process_mesh flat(world, {ranks});
        auto grid = make_columns();
        auto moved = std::move(grid);
        std::array<int, 1> total{world.rank()};
        moved.column().all_reduce(total, op::sum);
        EXPECT_EQ(total[0], ranks * (ranks - 1) / 2);
        EXPECT_EQ(moved.row().size(), 1);
        EXPECT_EQ(&moved.world(), &flat.world());
      },
      rank_counts);
}

// mesh.traffic() keeps each axis apart: an all-gather along axis a shows on that axis only, with
// (extent - 1) blocks each way.
TYPED_TEST(mesh_test, traffic_is_counted_per_axis) {
  TypeParam::run(
      [](communicator auto& world) {
        for_each_shape(world.size(), [&](const auto& shape) {
          SCOPED_TRACE(trace(shape, world.rank()));
          process_mesh mesh(world, shape);
          constexpr std::size_t D = decltype(mesh)::dimensions;
          for (std::size_t a = 0; a < D; ++a) {
            const auto before = mesh.traffic();
            const std::vector<float> mine(5, 1.0f);
            std::vector<float> all(5 * static_cast<std::size_t>(shape[a]));
            mesh.axis(static_cast<int>(a)).all_gather(mine, all);
            const auto moved = mesh.traffic() - before;
            const std::int64_t bytes = (shape[a] - 1) * 5 * std::int64_t{sizeof(float)};
            for (std::size_t b = 0; b < D; ++b)
              EXPECT_EQ(moved.axes[b], (b == a ? traffic_count{1, bytes, bytes} : traffic_count{}))
                  << "all_gather along axis " << a << ", reading axis " << b << ": " << to_string(moved);
            EXPECT_EQ(moved.world, traffic_count{});
            EXPECT_EQ(moved.total(), (traffic_count{1, bytes, bytes}));
          }
        });
      },
      rank_counts);
}

// Meshes of four dimensions, and groups of any set of axes: a group's members, in order, are the ranks
// that agree with me off those axes, counted row-major over them.
TYPED_TEST(mesh_test, groups_of_any_axes_hold_the_ranks_that_share_the_other_coordinates) {
  TypeParam::run(
      [](communicator auto& world) {
        for (const auto& shape : grid_shapes<4>(world.size())) {
          SCOPED_TRACE(trace(shape, world.rank()));
          process_mesh mesh(world, shape);
          const auto mine = mesh.coords();
          for (const std::vector<int>& axes :
               std::vector<std::vector<int>>{{0}, {1, 2, 3}, {0, 2}, {3, 1}, {0, 1, 2, 3}}) {
            auto& group = axes.size() == 2 ? mesh.group({axes[0], axes[1]})
                                           : mesh.group(std::span<const int>(axes.data(), axes.size()));
            std::vector<int> sorted = axes;
            std::ranges::sort(sorted);
            int expected_size = 1, expected_rank = 0;
            for (const int a : sorted) {
              expected_size *= shape[static_cast<std::size_t>(a)];
              expected_rank = expected_rank * shape[static_cast<std::size_t>(a)] + mine[static_cast<std::size_t>(a)];
            }
            ASSERT_EQ(group.size(), expected_size);
            EXPECT_EQ(group.rank(), expected_rank);
            std::vector<int> members(static_cast<std::size_t>(group.size()));
            group.all_gather(std::array{world.rank()}, members);
            for (int member = 0; member < group.size(); ++member) {
              auto point = mine;
              int rest = member;
              for (std::size_t k = sorted.size(); k-- > 0;) {
                const auto a = static_cast<std::size_t>(sorted[k]);
                point[a] = rest % shape[a];
                rest /= shape[a];
              }
              EXPECT_EQ(members[static_cast<std::size_t>(member)], row_major_rank(shape, point)) << "member " << member;
            }
            EXPECT_EQ(&group, &mesh.group(std::span<const int>(sorted.data(), sorted.size()))) << "made once";
          }
          expect_mesh_error(world.world_rank(), [&] { (void)mesh.group({1, 1}); }, {"process_mesh::group", "(1, 1)"});
          expect_mesh_error(world.world_rank(), [&] { (void)mesh.group({4}); }, {"(4)", "4-D grid"});
        }
      },
      {1, 4, 8});
}

// data_parallel_mesh: the data axis first, the model's grid over the rest.
TYPED_TEST(mesh_test, a_data_parallel_mesh_puts_replicas_beside_the_tensor_parallel_grid) {
  TypeParam::run(
      [](communicator auto& world) {
        const auto check = [&]<std::size_t D>(int replicas, const coordinates<D>& grid) {
          SCOPED_TRACE("data " + std::to_string(replicas) + " x " + shape_string(grid));
          data_parallel_mesh mesh(world, replicas, grid);
          const int group = world.size() / replicas;
          EXPECT_EQ(mesh.replicas(), replicas);
          EXPECT_EQ(mesh.replica(), world.rank() / group);
          EXPECT_EQ(mesh.data().size(), replicas);
          EXPECT_EQ(mesh.data().rank(), world.rank() / group);
          auto& tensor_parallel = mesh.tensor_parallel();
          EXPECT_EQ(tensor_parallel.shape(), grid);
          EXPECT_EQ(tensor_parallel.world().rank(), world.rank() % group);
          // The replicas of my piece are the ranks at my place in every replica's grid.
          std::vector<int> members(static_cast<std::size_t>(replicas));
          mesh.data().all_gather(std::array{world.rank()}, members);
          for (int r = 0; r < replicas; ++r)
            EXPECT_EQ(members[static_cast<std::size_t>(r)], r * group + world.rank() % group);
          auto moved = std::move(mesh);
          EXPECT_EQ(moved.tensor_parallel().world().size(), group) << "the grid survives a move";
        };
        if (world.size() == 8) {
          check(2, coordinates<1>{4});
          check(2, coordinates<2>{2, 2});
          check(1, coordinates<3>{2, 2, 2});
          check(8, coordinates<1>{1});
        }
        check(world.size(), coordinates<1>{1});
        check(1, coordinates<1>{world.size()});
        expect_mesh_error(world.world_rank(),
                          [&] { data_parallel_mesh mesh(world, 2, coordinates<2>{world.size(), 2}); },
                          {"data_parallel_mesh", "need " + std::to_string(4 * world.size()) + " ranks"});
        expect_mesh_error(world.world_rank(), [&] { data_parallel_mesh mesh(world, 0, coordinates<1>{world.size()}); },
                          {"data_parallel_mesh", "0 data replicas", "at least one replica"});
      },
      {1, 3, 8});
}

}  // namespace
