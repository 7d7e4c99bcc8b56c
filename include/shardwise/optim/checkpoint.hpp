#pragma once
// Checkpoints of a data-parallel update's state, written shard by shard, committed by the protocol of
// checkpoint_files.hpp (step folders, a `latest` pointer, a CRC-32C on every file, the manifest's own
// included).
//
// save_checkpoint (a collective): replica r writes `rank-<r>.bin` with the elements of its block r —
// float32 master weights, then each state variable, tensor elements only (no padding), in flat order —
// followed by the per-tensor state; rank 0 writes the manifest: the replica count, step count, bucket
// size, tensor shapes and state names, beside every file's size and CRC-32C. All of it goes into
// `<dir>/step-<N>/` (N: the update's steps), which `<dir>/latest` names once it is complete; the
// `keep` newest step folders stay.
//
// load_checkpoint (no collective): each replica reads the manifest and every shard, checks sizes and
// checksums, and takes the elements of the blocks it owns in its own layout, so a checkpoint saved by N
// replicas loads into M (resharding) bit-exactly. A missing, truncated or corrupted file is a
// checkpoint_error naming the file. Values are stored in the machine's byte order.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shardwise/comm/communicator.hpp"
#include "shardwise/core/error.hpp"
#include "shardwise/layout/layout.hpp"
#include "shardwise/optim/checkpoint_files.hpp"
#include "shardwise/optim/flat_layout.hpp"
#include "shardwise/optim/sharded.hpp"

namespace shardwise::optim {

namespace detail {

inline constexpr std::string_view flat_manifest_header = "shardwise-checkpoint 2";

// The friend of data_parallel_update that reads and restores a replica's blocks.
struct checkpoint_access {
  // What replica `rank` saves: master weights, then each state variable, of the tensor elements of its
  // block in flat order; then the per-tensor state.
  template <class Update>
  [[nodiscard]] static std::vector<float> block_values(const Update& update) {
    auto& u = const_cast<Update&>(update);  // slice_of hands out writable spans; nothing is written
    const auto& block = u.blocks_[Update::sharded ? 0 : static_cast<std::size_t>(u.rank_)];
    std::vector<float> values;
    for (std::size_t v = 0; v <= Update::K; ++v)
      for (const auto& run : block) {
        const auto piece = u.slice_of(run);
        const auto source = v == 0 ? piece.weights : piece.state[v - 1];
        values.insert(values.end(), source.begin(), source.end());
      }
    values.insert(values.end(), u.tensor_state_.begin(), u.tensor_state_.end());
    return values;
  }

  // Restores from whole tensors: values[v][first element of tensor t + i], v as in block_values.
  template <class Update>
  static void restore(Update& u, long steps, const std::vector<std::vector<float>>& values,
                      std::span<const std::size_t> tensor_begin, std::span<const float> tensor_state) {
    const auto& layout = u.layout_;
    for (std::size_t t = 0; t < layout.tensor_count(); ++t)
      for (std::size_t i = 0; i < layout.shape(t).size(); ++i)
        u.weights_.data()[layout.offset(t) + i] = values[0][tensor_begin[t] + i];
    for (const auto& block : u.blocks_)
      for (const auto& run : block) {
        const auto piece = u.slice_of(run);
        for (std::size_t v = 0; v <= Update::K; ++v) {
          const auto target = v == 0 ? piece.weights : piece.state[v - 1];
          std::copy_n(values[v].begin() + static_cast<std::ptrdiff_t>(tensor_begin[run.tensor] + run.first), run.count,
                      target.begin());
        }
      }
    std::ranges::copy(tensor_state, u.tensor_state_.begin());
    u.steps_ = steps;
  }

  template <class Update, class C>
  static void check_communicator(const Update& u, const C& comm, const char* operation) {
    u.check_communicator(comm, operation);
  }
};

}  // namespace detail

// Writes the update's state into `directory`/step-<steps done>/ (the directory is created if needed)
// and points `directory`/latest at it; the `keep` newest step folders stay. A collective over the
// update's replicas; every replica returns once the checkpoint is committed, or throws if any
// replica's part failed, leaving the previous checkpoint as it was.
template <communicator C, class Optimizer, weight_update Mode, class Weight>
void save_checkpoint(C& comm, const data_parallel_update<Optimizer, Mode, Weight>& update,
                     const std::filesystem::path& directory, int keep = 2) try {
  using access = detail::checkpoint_access;
  access::check_communicator(update, comm, "save_checkpoint");
  const auto values = access::block_values(update);
  std::string description = "replicas " + std::to_string(comm.size()) + "\nsteps " +
                            std::to_string(update.steps_done()) + "\nbucket_elements " +
                            std::to_string(update.layout().bucket_elements()) + "\ntensors " +
                            std::to_string(update.layout().tensor_count()) + "\n";
  for (const auto& shape : update.layout().shapes())
    description += std::to_string(shape.rows) + " " + std::to_string(shape.cols) + "\n";
  description += detail::state_names_line(Optimizer::state_names);
  detail::save_checkpoint_files(comm, directory, update.steps_done(), detail::flat_manifest_header, description,
                                std::as_bytes(std::span<const float>(values)), keep,
                                {comm.world_rank(), "save_checkpoint"});
} catch (...) {
  rethrow_within_call(comm.world_rank(), call_text("save_checkpoint", directory.string()));
}

// Restores the update's weights, state and step count from `path` (a directory saved into, whose
// `latest` names the checkpoint, or a step folder), whatever number of replicas saved it. The tensors
// and the optimizer's state variables must be those of the checkpoint. Collective over `comm`: a
// failure on any replica, or replicas given different checkpoints, throw on every replica.
template <communicator C, class Optimizer, weight_update Mode, class Weight>
void load_checkpoint(C& comm, data_parallel_update<Optimizer, Mode, Weight>& update,
                     const std::filesystem::path& path) try {
  using access = detail::checkpoint_access;
  access::check_communicator(update, comm, "load_checkpoint");
  const detail::checkpoint_call call{comm.world_rank(), "load_checkpoint"};
  detail::load_together(comm, path, call, [&] {
    detail::checkpoint_folder checkpoint(path, detail::flat_manifest_header, call);
    auto& in = checkpoint.manifest();
    in.expect("replicas");
    const int replicas = in.number<int>("the replica count", 1);
    in.end_line();
    in.expect("steps");
    const long steps = in.number<long>("the step count");
    in.end_line();
    in.expect("bucket_elements");
    const auto bucket_elements = in.number<std::size_t>("the bucket size");
    in.end_line();
    in.expect("tensors");
    std::vector<parameter_shape> shapes(in.count("the tensor count", 4));
    in.end_line();
    for (auto& shape : shapes) {
      shape.rows = in.number<std::size_t>("a tensor's rows");
      shape.cols = in.number<std::size_t>("a tensor's columns");
      in.end_line();
    }
    const auto state_names = detail::read_state_names(in);
    in.expect_end();

    const auto mismatch = [&](const std::string& what) {
      return call.error((checkpoint.path() / "manifest").string() + ": " + what);
    };
    const auto& layout = update.layout();
    const auto& ours = layout.shapes();
    if (!std::ranges::equal(shapes, ours)) {
      const auto [there, here] = std::ranges::mismatch(shapes, ours);
      const auto text = [](parameter_shape shape) {
        return extents_string(static_cast<std::int64_t>(shape.rows), static_cast<std::int64_t>(shape.cols));
      };
      throw mismatch("it holds " + std::to_string(shapes.size()) + " tensors, the update " +
                     std::to_string(ours.size()) +
                     (there != shapes.end() && here != ours.end()
                          ? "; tensor " + std::to_string(there - shapes.begin()) + " is " + text(*there) +
                                " there and " + text(*here) + " in the update"
                          : ""));
    }
    if (!std::ranges::equal(state_names, Optimizer::state_names))
      throw mismatch("its optimizer state is " + detail::names_text(state_names) + ", the update's optimizer keeps " +
                     detail::names_text(Optimizer::state_names));
    const auto files = checkpoint.files();
    if (files.size() != static_cast<std::size_t>(replicas) || files.back().rank != replicas - 1)
      throw mismatch("it lists " + std::to_string(files.size()) + " files for " + std::to_string(replicas) +
                     " replicas; each replica writes one");

    // Whole tensors, back to back: values[v][tensor_begin[t] + i].
    std::vector<std::size_t> tensor_begin;
    std::size_t elements = 0;
    for (const auto& shape : shapes) {
      tensor_begin.push_back(elements);
      elements += shape.size();
    }
    std::size_t tensor_state_floats = 0;
    for (std::size_t t = 0; t < layout.tensor_count(); ++t) tensor_state_floats += update.tensor_state(t).size();
    constexpr std::size_t kinds = 1 + state_count<Optimizer>;
    std::vector<std::vector<float>> values(kinds, std::vector<float>(elements));
    std::vector<float> tensor_state(tensor_state_floats);

    const flat_layout saved(shapes, replicas, bucket_elements);
    for (int r = 0; r < replicas; ++r) {
      const auto& file = files[static_cast<std::size_t>(r)];
      const auto bytes = checkpoint.read(file);
      const auto runs = saved.segments_of(r);
      std::size_t block_elements = 0;
      for (const auto& run : runs) block_elements += run.count;
      if (bytes.size() != (kinds * block_elements + tensor_state_floats) * sizeof(float))
        throw call.error(checkpoint.file_path(file) + " holds " + std::to_string(bytes.size()) +
                         " bytes, the block the manifest describes " +
                         std::to_string((kinds * block_elements + tensor_state_floats) * sizeof(float)));
      std::size_t at = 0;
      const auto copy = [&](float* into, std::size_t count) {
        if (count == 0) return;  // an empty vector's data() may be null, which memcpy may not be given
        std::memcpy(into, bytes.data() + at, count * sizeof(float));
        at += count * sizeof(float);
      };
      for (std::size_t v = 0; v < kinds; ++v)
        for (const auto& run : runs) copy(values[v].data() + tensor_begin[run.tensor] + run.first, run.count);
      if (r == 0) copy(tensor_state.data(), tensor_state_floats);
    }
    access::restore(update, steps, values, tensor_begin, tensor_state);
    return steps;
  });
} catch (...) {
  rethrow_within_call(comm.world_rank(), call_text("load_checkpoint", path.string()));
}

}  // namespace shardwise::optim
