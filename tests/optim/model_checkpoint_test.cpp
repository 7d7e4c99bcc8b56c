// Checkpoints of a model's training state: a GPT trained on one data x tensor-parallel mesh, saved,
// and loaded on the same mesh (the next step is bitwise the uninterrupted run's) and on meshes of
// other shapes and families (weights and optimizer state land exactly where the layouts put them; the
// next step agrees within float rounding); a weight cut unevenly by columns loads bit for bit into its
// padded pieces; a checkpoint of another model or another optimizer, a damaged file and a missing one are
// errors naming what is wrong; a save leaves earlier ones alone. The weights alone load into a model
// with no update, on any mesh and in bf16.
// The 2-D and 3-D families' models compile in sources of their own (model_checkpoint_checks.hpp).
#include "shardwise/optim/model_checkpoint.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "optim/model_checkpoint_checks.hpp"
#include "shardwise/core/bf16.hpp"
#include "shardwise/mesh/shape.hpp"
#include "shardwise/nn/family.hpp"
#include "shardwise/nn/parameter.hpp"
#include "shardwise/optim/adamw.hpp"
#include "shardwise/optim/sgd.hpp"
#include "shardwise/optim/sharded.hpp"
#include "support/backends.hpp"
#include "support/files.hpp"

namespace {

using namespace shardwise;
namespace fs = std::filesystem;
using namespace shardwise::testing;

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
          expect_resumes_elsewhere<Family>(world, folder, saved, after, other_replicas, grid);
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

// The GPT above cuts its columns evenly on every mesh (its heads divide them); a weight of 7 columns on
// 3 or 4 ranks has short last pieces whose storage is wider than what they own. Saved there, it loads
// bit for bit into those pieces, and on data replicas that hold it whole.
template <class Mesh>
struct uneven_columns {
  nn::parameter<float, row_1d<padded>, Mesh> weight;
  template <class F>
  void for_each_parameter(F&& f) {
    f("weight", weight);
  }
};

TYPED_TEST(model_checkpoint, a_weight_whose_columns_are_cut_unevenly_loads_bit_for_bit) {
  TypeParam::run(
      [](communicator auto& world) {
        using mesh_type = data_parallel_mesh<std::remove_cvref_t<decltype(world)>, 1>;
        using model_type = uneven_columns<typename mesh_type::tensor_parallel_mesh_type>;
        const fs::path folder = shardwise::testing::shared_folder(world, "model-checkpoint-uneven-columns");
        const matrix_extents extents{5, 7};
        matrix saved;
        {
          mesh_type mesh(world, 1, {world.size()});
          model_type model{{mesh.tensor_parallel(), extents, 3, 1.0f}};
          optim::sharded_update<optim::sgd> update(model, mesh.data());
          saved = all_gather(model.weight.value);
          optim::save_model_checkpoint(folder, update, mesh.data(), world);
        }
        for (const int replicas : {1, world.size()}) {
          mesh_type mesh(world, replicas, {world.size() / replicas});
          model_type model{{mesh.tensor_parallel(), extents, 4, 1.0f}};  // other values, which the load replaces
          optim::sharded_update<optim::sgd> update(model, mesh.data());
          (void)optim::load_model_checkpoint(folder, update, world);
          EXPECT_EQ(all_gather(model.weight.value), saved) << "data " << replicas;
        }
        world.barrier();
        if (world.rank() == 0) fs::remove_all(folder);
      },
      {3, 4});
}

// A bf16 model's checkpoint keeps its float32 master weights: loaded on the same mesh, the next step is
// the uninterrupted run's, bit for bit (its bf16 weights alone would restart the master weights from
// their rounding).
TYPED_TEST(model_checkpoint, a_bf16_model_resumes_bitwise_from_its_master_weights) {
  TypeParam::run(
      [](communicator auto& world) {
        using C = std::remove_cvref_t<decltype(world)>;
        using run_type = training<nn::tensor_parallel_1d<padded>, C, 1, bf16>;
        const fs::path folder = shardwise::testing::shared_folder(world, "model-checkpoint-bf16");
        const int replicas = world.size() >= 2 ? 2 : 1;
        global_state after;
        {
          run_type run(world, replicas, {world.size() / replicas});
          run.step(1);
          run.step(2);
          optim::save_model_checkpoint(folder, run.update, run.mesh.data(), world);
          run.step(3);
          after = run.state();
        }
        {
          run_type run(world, replicas, {world.size() / replicas});
          (void)optim::load_model_checkpoint(folder, run.update, world);
          run.step(3);
          expect_equal(run.state(), after, 0, "resumed on the same mesh");
        }
        world.barrier();
        if (world.rank() == 0) fs::remove_all(folder);
      },
      {1, 2, 4});
}

// The weights alone, loaded into a model with no update (to evaluate it, or to train on with another
// optimizer): on meshes other than the saving one, each parameter whole is the saved weight bit for bit
// (rounded to bf16 in a bf16 model); the AdamW state the checkpoint holds is passed over; a model of
// other parameters is refused, as is a bf16 model whose update (and its master weights) is built.
template <class T, class Communicator>
void expect_weights_load(Communicator& world, const fs::path& folder, const global_state& saved, int replicas) {
  SCOPED_TRACE("data " + std::to_string(replicas) + (std::is_same_v<T, bf16> ? ", bf16" : ", float"));
  using mesh_type = data_parallel_mesh<Communicator, 1>;
  mesh_type mesh(world, replicas, {world.size() / replicas});
  auto other_start = config;
  other_start.seed = 9;  // other initial values, which the load replaces
  model::gpt<T, nn::tensor_parallel_1d<padded>, typename mesh_type::tensor_parallel_mesh_type> gpt(
      mesh.tensor_parallel(), other_start);
  const auto metadata = optim::load_model_weights(folder, gpt, world);
  EXPECT_EQ(metadata.at("steps"), "2");
  EXPECT_EQ(metadata.at("note"), "weights");
  std::size_t checked = 0;
  gpt.for_each_parameter([&](const std::string& name, auto& p) {
    const matrix expected = saved.at(name).unaryExpr([](float v) { return static_cast<float>(static_cast<T>(v)); });
    EXPECT_EQ(all_gather(p.value).template cast<float>(), expected) << name;
    ++checked;
  });
  EXPECT_EQ(checked * 4, saved.size());  // each parameter's weights, master weights and two moments
}

TYPED_TEST(model_checkpoint, the_weights_alone_load_into_a_model_with_no_update_on_any_mesh) {
  TypeParam::run(
      [](communicator auto& world) {
        using C = std::remove_cvref_t<decltype(world)>;
        const fs::path folder = shardwise::testing::shared_folder(world, "model-checkpoint-weights");
        const int replicas = world.size() >= 2 ? 2 : 1;
        global_state saved;
        {
          training<nn::tensor_parallel_1d<padded>, C, 1> run(world, replicas, {world.size() / replicas});
          run.step(1);
          run.step(2);
          optim::save_model_checkpoint(folder, run.update, run.mesh.data(), world, {{"note", "weights"}});
          saved = run.state();
        }
        expect_weights_load<float>(world, folder, saved, 1);
        expect_weights_load<float>(world, folder, saved, world.size());
        expect_weights_load<bf16>(world, folder, saved, 1);

        data_parallel_mesh<C, 1> mesh(world, 1, {world.size()});
        auto deeper = config;
        deeper.layers = 2;
        model::gpt<float, nn::tensor_parallel_1d<padded>, typename data_parallel_mesh<C, 1>::tensor_parallel_mesh_type>
            other(mesh.tensor_parallel(), deeper);
        try {
          (void)optim::load_model_weights(folder, other, world);
          ADD_FAILURE() << "loaded the weights of a model of one layer into one of two";
        } catch (const optim::checkpoint_error& e) {
          const std::string what = e.what();
          EXPECT_NE(what.find("load_model_weights(" + folder.string() + ")"), std::string::npos) << what;
          EXPECT_NE(what.find("it has no parameter \"blocks.1."), std::string::npos) << what;
        }
        // A bf16 model whose update is built keeps float32 master weights the load cannot reach.
        training<nn::tensor_parallel_1d<padded>, C, 1, bf16> updated(world, 1, {world.size()});
        try {
          (void)optim::load_model_weights(folder, updated.gpt, world);
          ADD_FAILURE() << "loaded the weights of a bf16 model past its update's master weights";
        } catch (const argument_error& e) {
          EXPECT_NE(std::string(e.what()).find("load_model_weights(" + folder.string() + "): parameter \"" +
                                               "embedding.token.weight\" is bound to an update"),
                    std::string::npos)
              << e.what();
        }
        world.barrier();
        if (world.rank() == 0) fs::remove_all(folder);
      },
      {1, 2, 4});
}

// Overwrites a byte of a saved file: on rank 0, once every rank has finished what came before.
void damage(communicator auto& world, const fs::path& file) {
  world.barrier();
  if (world.rank() == 0) {
    std::fstream bytes(file, std::ios::in | std::ios::out | std::ios::binary);
    bytes.seekp(40);
    bytes.put('\x7f');
  }
  world.barrier();
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
        // On the run's mesh, a model of the run's type: a wider one names the first parameter whose shape
        // differs; the same one under another optimizer names both optimizers' state variables.
        using model_type = decltype(run.gpt);
        {
          auto wider = config;
          wider.hidden = 24;
          model_type other(run.mesh.tensor_parallel(), wider);
          optim::sharded_update<optim::adamw> update(other, run.mesh.data());
          expect_error(update, folder, "parameter \"embedding.token.weight\" is 13x16 there and 13x24 in this model");
        }
        {
          model_type same(run.mesh.tensor_parallel(), config);
          optim::sharded_update<optim::sgd> update(same, run.mesh.data());
          expect_error(update, folder,
                       "its optimizer state is {first_moment, second_moment}, this optimizer keeps none");
        }
        // A damaged file names itself; a missing manifest names the file.
        damage(world, folder / "step-2" / "rank-0.bin");
        expect_error(run.update, folder / "step-2", "rank-0.bin (written by rank 0) is damaged: CRC-32C");
        expect_error(run.update, folder / "nowhere", "there is no such folder");
        // The latest checkpoint is untouched by all of this.
        EXPECT_NO_THROW((void)optim::load_model_checkpoint(folder, run.update, world));
        world.barrier();
        if (world.rank() == 0) fs::remove_all(folder);
      },
      {1, 3});
}

// The summary is the manifest alone: the steps, the state names, every parameter's global shape and the
// metadata, without a model, and whatever the rank files hold.
TYPED_TEST(model_checkpoint, a_summary_reads_the_manifest_alone) {
  TypeParam::run(
      [](communicator auto& world) {
        using C = std::remove_cvref_t<decltype(world)>;
        const fs::path folder = shardwise::testing::shared_folder(world, "model-checkpoint-summary");
        training<nn::tensor_parallel_1d<padded>, C, 1> run(world, 1, {world.size()});
        run.step(1);
        optim::save_model_checkpoint(folder, run.update, run.mesh.data(), world, {{"heads", "2"}});
        damage(world, folder / "step-1" / "rank-0.bin");
        const auto summary = optim::read_model_checkpoint_summary(folder);
        EXPECT_EQ(summary.steps, 1);
        EXPECT_EQ(summary.state_names, (std::vector<std::string>{"first_moment", "second_moment"}));
        std::map<std::string, matrix_extents> shapes;
        for (const auto& record : run.update.parameters()) shapes[record.name] = record.extents;
        EXPECT_EQ(summary.parameters, shapes);
        EXPECT_EQ(summary.parameters.at("embedding.token.weight"), (matrix_extents{config.vocabulary, config.hidden}));
        EXPECT_TRUE(summary.tables.empty());
        EXPECT_EQ(summary.metadata, (std::map<std::string, std::string>{{"heads", "2"}}));
        try {
          (void)optim::read_model_checkpoint_summary(folder / "nowhere");
          ADD_FAILURE() << "read a summary of a folder that does not exist";
        } catch (const optim::checkpoint_error& e) {
          EXPECT_EQ(std::string(e.what()).rfind("[no rank] read_model_checkpoint_summary(" +
                                                    (folder / "nowhere").string() + "): no checkpoint at ",
                                                0),
                    0U)
              << e.what();
        }
        world.barrier();
        if (world.rank() == 0) fs::remove_all(folder);
      },
      {1, 3});
}

}  // namespace
