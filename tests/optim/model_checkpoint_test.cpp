// Checkpoints of a model's training state: a GPT trained on one data x tensor-parallel mesh, saved,
// and loaded on the same mesh (the next step is bitwise the uninterrupted run's) and on meshes of
// other shapes and families (weights and optimizer state land exactly where the layouts put them; the
// next step agrees within float rounding); a checkpoint of another model, a damaged file and a
// missing one are errors naming what is wrong; a save leaves earlier ones alone.
#include "shardwise/optim/model_checkpoint.hpp"

#include <gtest/gtest.h>

#include <Eigen/Core>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "shardwise/mesh/data_parallel_mesh.hpp"
#include "shardwise/model/gpt.hpp"
#include "shardwise/optim/adamw.hpp"
#include "shardwise/optim/sharded.hpp"
#include "shardwise/tensor/distribute.hpp"
#include "support/backends.hpp"
#include "support/files.hpp"

namespace {

using namespace shardwise;
namespace fs = std::filesystem;
using matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <class Backend>
class model_checkpoint : public ::testing::Test {};
TYPED_TEST_SUITE(model_checkpoint, shardwise::testing::backends);

const model::gpt_config config{
    .vocabulary = 13, .context = 4, .hidden = 16, .heads = 8, .layers = 1, .expansion = 2, .seed = 5};
constexpr std::int64_t samples = 8;

// Every parameter and each of its state variables, whole, by name.
using global_state = std::map<std::string, matrix>;

// The model, its sharded AdamW update and the global batch of each step, on data `replicas` x `grid`.
template <class Family, class Communicator, std::size_t D>
struct training {
  data_parallel_mesh<Communicator, D> mesh;
  model::gpt<float, Family, typename data_parallel_mesh<Communicator, D>::tensor_parallel_mesh_type> gpt;
  optim::sharded_update<optim::adamw> update;

  training(Communicator& world, int replicas, const coordinates<D>& grid)
      : mesh(world, replicas, grid), gpt(mesh.tensor_parallel(), config), update(gpt, mesh.data(), optim::adamw{}) {}

  void step(long number) {
    const std::int64_t count = samples / mesh.replicas();
    std::vector<std::int32_t> tokens, targets;
    for (std::int64_t i = mesh.replica() * count * config.context; i < (mesh.replica() + 1) * count * config.context;
         ++i) {
      tokens.push_back(static_cast<std::int32_t>((i * 5 + number * 3 + i / 7) % config.vocabulary));
      targets.push_back(static_cast<std::int32_t>((i * 5 + number * 3 + 1) % config.vocabulary));
    }
    (void)gpt.forward(tokens, targets);
    gpt.backward();
    (void)update.step(mesh.data(), mesh.tensor_parallel().world(), {0.01f, 1.0f});
  }

  global_state state() {
    global_state whole;
    std::size_t t = 0;
    gpt.for_each_parameter([&](const std::string& name, auto& p) {
      whole[name] = all_gather(p.value);
      for (std::size_t k = 0; k < optim::adamw::state_names.size(); ++k) {
        auto values = p.value;  // the same layout; its own storage
        const auto gathered = update.gather_state(mesh.data(), k, t);
        std::copy(gathered.begin(), gathered.end(), values.data().begin());
        whole[name + "/" + std::string(optim::adamw::state_names[k])] = all_gather(values);
      }
      ++t;
    });
    return whole;
  }
};

// Within `tolerance` (0: bit for bit). Rounding aside, the keys' bias has no effect on any output
// (softmax does not change when all scores of a row move alike), so its gradient is rounding alone,
// and Adam, which divides by the gradient's scale, turns that rounding into steps of the learning
// rate: after a step on another mesh it differs, while every output agrees. Compared bitwise only.
void expect_equal(const global_state& got, const global_state& expected, float tolerance, const std::string& what) {
  ASSERT_EQ(got.size(), expected.size()) << what;
  for (const auto& [name, values] : expected) {
    if (tolerance != 0 && name.find("key.bias") != std::string::npos) continue;
    const matrix& other = got.at(name);
    ASSERT_EQ(other.rows(), values.rows()) << what << ": " << name;
    if (tolerance == 0) EXPECT_EQ(other, values) << what << ": " << name;
    else
      EXPECT_LE((other - values).norm(), tolerance * (values.norm() + 1e-3f)) << what << ": " << name;
  }
}

TYPED_TEST(model_checkpoint, resumes_bitwise_on_the_same_mesh_and_within_rounding_on_any_other) {
  TypeParam::run(
      [](communicator auto& world) {
        using C = std::remove_cvref_t<decltype(world)>;
        const fs::path folder = shardwise::testing::shared_folder(world, "model-checkpoint-resume");
        const int replicas = world.size() >= 2 ? 2 : 1;
        global_state saved, after;
        {
          training<nn::tensor_parallel_1d<padded>, C, 1> run(world, replicas, {world.size() / replicas});
          run.step(1);
          run.step(2);
          optim::save_model_checkpoint(folder, run.update, run.mesh.data(), world, {{"note", "two steps"}});
          saved = run.state();
          run.step(3);
          after = run.state();
        }
        // The same mesh: the step after the load is the uninterrupted run's, bit for bit.
        {
          training<nn::tensor_parallel_1d<padded>, C, 1> run(world, replicas, {world.size() / replicas});
          const auto metadata = optim::load_model_checkpoint(folder, run.update, world);
          EXPECT_EQ(metadata.at("note"), "two steps");
          EXPECT_EQ(metadata.at("steps"), "2");
          EXPECT_EQ(run.update.steps_done(), 2);
          expect_equal(run.state(), saved, 0, "loaded on the same mesh");
          run.step(3);
          expect_equal(run.state(), after, 0, "resumed on the same mesh");
        }
        // Other meshes: exact copies of what was saved, then the same step within rounding.
        const auto elsewhere = [&]<class Family, std::size_t D>(int other_replicas, const coordinates<D>& grid) {
          SCOPED_TRACE("data " + std::to_string(other_replicas) + " x " + detail::shape_string(grid));
          training<Family, C, D> run(world, other_replicas, grid);
          (void)optim::load_model_checkpoint(folder, run.update, world);
          expect_equal(run.state(), saved, 0, "loaded on another mesh");
          run.step(3);
          expect_equal(run.state(), after, 1e-5f, "resumed on another mesh");
        };
        elsewhere.template operator()<nn::tensor_parallel_1d<padded>>(1, coordinates<1>{world.size()});
        elsewhere.template operator()<nn::tensor_parallel_1d<padded>>(world.size(), coordinates<1>{1});
        if (world.size() == 4) elsewhere.template operator()<nn::tensor_parallel_2d<padded>>(1, coordinates<2>{2, 2});
        if (world.size() == 8) {
          elsewhere.template operator()<nn::tensor_parallel_2d<padded>>(2, coordinates<2>{2, 2});
          elsewhere.template operator()<nn::tensor_parallel_3d<directions<>, padded>>(1, coordinates<3>{2, 2, 2});
        }
        if (world.size() == 2)
          elsewhere.template operator()<nn::tensor_parallel_3d<directions<>, padded>>(2, coordinates<3>{1, 1, 1});
        world.barrier();
        if (world.rank() == 0) fs::remove_all(folder);
      },
      {1, 2, 4, 8});
}

TYPED_TEST(model_checkpoint, saves_commit_whole_keep_the_newest_and_refuse_what_does_not_fit) {
  TypeParam::run(
      [](communicator auto& world) {
        using C = std::remove_cvref_t<decltype(world)>;
        const fs::path folder = shardwise::testing::shared_folder(world, "model-checkpoint-errors");
        training<nn::tensor_parallel_1d<padded>, C, 1> run(world, 1, {world.size()});
        for (long s = 1; s <= 3; ++s) {
          run.step(s);
          optim::save_model_checkpoint(folder, run.update, run.mesh.data(), world, {}, /*keep*/ 2);
        }
        world.barrier();
        EXPECT_FALSE(fs::exists(folder / "step-1")) << "older than the two newest";
        EXPECT_TRUE(fs::exists(folder / "step-2"));
        EXPECT_TRUE(fs::exists(folder / "step-3" / "manifest"));
        EXPECT_FALSE(fs::exists(folder / "step-3.tmp"));

        const auto expect_error = [&](auto& update, const fs::path& path, const std::string& words) {
          try {
            (void)optim::load_model_checkpoint(path, update, world);
            ADD_FAILURE() << "loaded; expected an error saying \"" << words << "\"";
          } catch (const optim::checkpoint_error& e) {
            EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
          }
        };
        // Another model: a wider one names the first parameter whose shape differs.
        {
          auto wider = config;
          wider.hidden = 24;
          data_parallel_mesh mesh(world, 1, coordinates<1>{world.size()});
          model::gpt<float, nn::tensor_parallel_1d<padded>, std::remove_cvref_t<decltype(mesh.tensor_parallel())>>
              other(mesh.tensor_parallel(), wider);
          optim::sharded_update<optim::adamw> update(other, mesh.data());
          expect_error(update, folder, "parameter \"embedding.token.weight\" is 13x16 there and 13x24 in this model");
        }
        world.barrier();
        // A damaged file names itself; a missing manifest names the file.
        if (world.rank() == 0) {
          std::fstream file(folder / "step-2" / "rank-0.bin", std::ios::in | std::ios::out | std::ios::binary);
          file.seekp(40);
          file.put('\x7f');
        }
        world.barrier();
        expect_error(run.update, folder / "step-2", "rank-0.bin (written by rank 0) is damaged: CRC-32C");
        expect_error(run.update, folder / "nowhere", "manifest");
        // The latest checkpoint is untouched by all of this.
        EXPECT_NO_THROW((void)optim::load_model_checkpoint(folder, run.update, world));
        world.barrier();
        if (world.rank() == 0) fs::remove_all(folder);
      },
      {1, 3});
}

}  // namespace
