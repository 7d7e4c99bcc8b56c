#pragma once
// Checkpoints of a model's training state that any mesh can load: every parameter and each of its
// optimizer state variables saved as a global named tensor ("blocks.0.mlp.expand.weight",
// "blocks.0.mlp.expand.weight/exp_avg"), in blocks that carry their global offsets, as PyTorch's
// distributed checkpoint does.
//
//   save_model_checkpoint(dir, update, mesh.data(), mesh.tensor_parallel().world(), world, {{"seed", "1"}});
//   auto metadata = load_model_checkpoint(dir, update, world);     // on this run's mesh, any other's save
//
// save (collective over `world`): the state is gathered over the data replicas (the update may be
// sharded), then the ranks of replica 0 that hold the counted copy of a block (optim/sharded.hpp: one
// copy among the tensor-parallel replicas) write their blocks, one file per rank; rank 0 writes the
// manifest — steps, every parameter's name and global shape, the state names, the caller's metadata,
// every file's size and FNV-1a checksum. All of it goes into `<dir>/step-<N>.tmp/`, renamed to
// `<dir>/step-<N>/` once complete and flushed; then `<dir>/latest` (naming that folder) is replaced
// atomically. A save never touches an earlier step's folder, so a crash at any point leaves the last
// complete checkpoint loadable; the `keep` newest folders are kept.
//
// load (no collective): reads the manifest of `<dir>/latest` (or of a step folder given directly),
// checks that the model's parameters are the checkpoint's by name and global shape, verifies every
// file's size and checksum, and fills this rank's blocks of weights and state from the saved blocks
// that intersect them — so the mesh, the layouts and the padding may all differ from the saving run's.
// Values are copied, never combined: a load is bit-exact. Values are in the machine's byte order.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "shardwise/comm/communicator.hpp"
#include "shardwise/core/error.hpp"
#include "shardwise/layout/layout.hpp"
#include "shardwise/optim/checkpoint.hpp"
#include "shardwise/optim/sharded.hpp"

namespace shardwise::optim {

namespace detail {

inline constexpr std::string_view model_manifest_header = "shardwise-model-checkpoint 1";

// One saved block: a rectangle of a named global tensor and where its elements lie in a file.
struct saved_block {
  std::int64_t row_offset = 0, col_offset = 0, rows = 0, cols = 0;
  const float* values = nullptr;  // rows x cols, row-major
};

template <class Value>
void append_bytes(std::vector<std::byte>& out, const Value* values, std::size_t count) {
  const auto* bytes = reinterpret_cast<const std::byte*>(values);
  out.insert(out.end(), bytes, bytes + count * sizeof(Value));
}

// Where each of a parameter's local blocks starts in its storage (blocks back to back, stored extents).
[[nodiscard]] inline std::vector<std::size_t> block_starts(const parameter_record& record) {
  std::vector<std::size_t> starts;
  std::size_t at = 0;
  for (const block_info& b : record.blocks) {
    starts.push_back(at);
    at += static_cast<std::size_t>(b.stored_elements());
  }
  return starts;
}

// Appends the owned elements of every block of `storage` under `name`: name length, name, offsets and
// extents, values.
inline void append_blocks(std::vector<std::byte>& out, const std::string& name, const parameter_record& record,
                          std::span<const float> storage) {
  const auto starts = block_starts(record);
  for (std::size_t b = 0; b < record.blocks.size(); ++b) {
    const block_info& info = record.blocks[b];
    if (info.elements() == 0) continue;
    const auto length = static_cast<std::uint32_t>(name.size());
    append_bytes(out, &length, 1);
    append_bytes(out, name.data(), name.size());
    const std::int64_t header[4] = {info.row_offset, info.col_offset, info.rows, info.cols};
    append_bytes(out, header, 4);
    for (std::int64_t r = 0; r < info.rows; ++r)
      append_bytes(out, storage.data() + starts[b] + static_cast<std::size_t>(r * info.stored_cols),
                   static_cast<std::size_t>(info.cols));
  }
}

[[nodiscard]] inline std::string state_tensor_name(const std::string& parameter, std::string_view state) {
  return parameter + "/" + std::string(state);
}

inline void sync_directory(const std::filesystem::path& directory) {
  const int handle = ::open(directory.c_str(), O_RDONLY);
  if (handle >= 0) {
    ::fsync(handle);
    ::close(handle);
  }
}

}  // namespace detail

// Collective over `world` (every rank of every replica). Returns once the checkpoint is committed; a
// failure on any rank throws checkpoint_error on every rank and leaves earlier checkpoints as they were.
// `data` is the update's communicator (the replicas), `world` every rank of the run. Metadata keys are
// single words; values are one line.
template <class Optimizer, weight_update Mode, class Weight, communicator Data, communicator World>
void save_model_checkpoint(const std::filesystem::path& directory, const data_parallel_update<Optimizer, Mode, Weight>& update,
                           Data& data, World& world, const std::map<std::string, std::string>& metadata = {},
                           int keep = 2) try {
  namespace fs = std::filesystem;
  const int rank = world.world_rank();
  const long step = update.steps_done();
  const fs::path final_folder = directory / ("step-" + std::to_string(step));
  const fs::path folder = directory / ("step-" + std::to_string(step) + ".tmp");
  const auto records = update.parameters();
  constexpr auto state_names = Optimizer::state_names;

  // Every rank of every replica takes part in gathering the state; replica 0's counted copies write.
  std::vector<std::vector<std::vector<float>>> states(records.size());
  for (std::size_t t = 0; t < records.size(); ++t)
    for (std::size_t k = 0; k < state_names.size(); ++k) states[t].push_back(update.gather_state(data, k, t));
  std::vector<std::byte> bytes;
  const bool writes = data.rank() == 0;
  if (writes)
    for (std::size_t t = 0; t < records.size(); ++t) {
      if (!records[t].counted) continue;
      detail::append_blocks(bytes, records[t].name, records[t], update.weights(t));
      for (std::size_t k = 0; k < state_names.size(); ++k)
        detail::append_blocks(bytes, detail::state_tensor_name(records[t].name, state_names[k]), records[t], states[t][k]);
    }

  // A rank's own failure is raised again, as it was, once every rank knows that one failed.
  std::exception_ptr failure;
  if (world.rank() == 0) try {
      fs::remove_all(folder);
      fs::create_directories(folder);
    } catch (...) {
      failure = std::current_exception();
    }
  int failed = failure ? 1 : 0;
  world.broadcast(std::span<int>(&failed, 1), 0);
  if (failed != 0) {
    if (failure) rethrow_naming_rank<checkpoint_error>(failure, rank, "save_model_checkpoint");
    throw checkpoint_error(rank, "save_model_checkpoint", "rank 0 could not create " + folder.string());
  }

  const std::string file = "rank-" + std::to_string(world.rank()) + ".bin";
  try {
    if (writes && !bytes.empty()) detail::write_atomically(folder / file, bytes, rank);
  } catch (...) {
    failure = std::current_exception();
  }
  const std::uint64_t own[3] = {failure ? 1u : 0u, writes && !bytes.empty() ? bytes.size() : 0u, detail::fnv1a(bytes)};
  std::vector<std::uint64_t> files(3 * static_cast<std::size_t>(world.size()));
  world.all_gather(std::span<const std::uint64_t>(own), std::span<std::uint64_t>(files));
  for (int r = 0; r < world.size(); ++r)
    if (files[3 * static_cast<std::size_t>(r)] != 0) {
      if (failure) rethrow_naming_rank<checkpoint_error>(failure, rank, "save_model_checkpoint");
      throw checkpoint_error(rank, "save_model_checkpoint",
                             "rank " + std::to_string(r) + " could not write its blocks into " + folder.string());
    }

  if (world.rank() == 0) try {
      std::ostringstream manifest;
      manifest << detail::model_manifest_header << "\nsteps " << step << "\nstate " << state_names.size();
      for (const auto name : state_names) manifest << ' ' << name;
      manifest << "\nparameters " << records.size() << '\n';
      for (const auto& record : records)
        manifest << record.name << ' ' << record.extents.rows << ' ' << record.extents.cols << '\n';
      manifest << "metadata " << metadata.size() << '\n';
      for (const auto& [key, value] : metadata) manifest << key << ' ' << value << '\n';
      for (int r = 0; r < world.size(); ++r)
        if (files[3 * static_cast<std::size_t>(r) + 1] != 0)
          manifest << "file rank-" << r << ".bin " << files[3 * static_cast<std::size_t>(r) + 1] << ' '
                   << files[3 * static_cast<std::size_t>(r) + 2] << '\n';
      const std::string text = manifest.str();
      detail::write_atomically(folder / "manifest", std::as_bytes(std::span(text)), rank);
      fs::remove_all(final_folder);  // a complete earlier save of the same step, replaced whole
      fs::rename(folder, final_folder);
      detail::sync_directory(directory);
      const std::string latest = final_folder.filename().string() + "\n";
      detail::write_atomically(directory / "latest", std::as_bytes(std::span(latest)), rank);
      // The newest `keep` step folders stay; older ones go once `latest` names the new one.
      std::vector<std::pair<long, fs::path>> saved;
      for (const auto& entry : fs::directory_iterator(directory)) {
        const std::string name = entry.path().filename().string();
        if (entry.is_directory() && name.starts_with("step-") && name.find('.') == std::string::npos)
          saved.emplace_back(std::stol(name.substr(5)), entry.path());
      }
      std::ranges::sort(saved, std::greater<>());
      for (std::size_t i = static_cast<std::size_t>(std::max(keep, 1)); i < saved.size(); ++i)
        fs::remove_all(saved[i].second);
    } catch (...) {
      failure = std::current_exception();
    }
  failed = failure ? 1 : 0;
  world.broadcast(std::span<int>(&failed, 1), 0);
  if (failed != 0) {
    if (failure) rethrow_naming_rank<checkpoint_error>(failure, rank, "save_model_checkpoint");
    throw checkpoint_error(rank, "save_model_checkpoint",
                           "rank 0 could not commit the checkpoint in " + directory.string());
  }
} catch (...) {
  rethrow_within_call(world.world_rank(), call_text("save_model_checkpoint", directory.string(),
                                                    "step " + std::to_string(update.steps_done())));
}

// Loads the checkpoint at `path` (a directory with `latest`, or a step folder) into `update` and so
// into the model it was built from. Returns the saved metadata, with "steps" added.
template <class Optimizer, weight_update Mode, class Weight, communicator World>
std::map<std::string, std::string> load_model_checkpoint(const std::filesystem::path& path,
                                                         data_parallel_update<Optimizer, Mode, Weight>& update,
                                                         World& world) try {
  namespace fs = std::filesystem;
  const int rank = world.world_rank();
  const auto fail = [&](const std::string& what) -> checkpoint_error {
    return checkpoint_error(rank, "load_model_checkpoint", path.string() + ": " + what);
  };
  fs::path folder = path;
  if (fs::exists(path / "latest")) {
    const auto latest = detail::read_whole_file(path / "latest", rank);
    std::string name(reinterpret_cast<const char*>(latest.data()), latest.size());
    name.erase(name.find_last_not_of(" \n") + 1);
    folder = path / name;
  }
  const auto manifest_bytes = detail::read_whole_file(folder / "manifest", rank);
  std::istringstream in(std::string(reinterpret_cast<const char*>(manifest_bytes.data()), manifest_bytes.size()));
  const auto expect = [&](std::string_view word) {
    std::string token;
    if (!(in >> token) || token != word) throw fail("the manifest is malformed (expected \"" + std::string(word) + "\")");
  };
  std::string header;
  std::getline(in, header);
  if (header != detail::model_manifest_header) throw fail("not a model checkpoint (its manifest starts \"" + header + "\")");
  long steps = 0;
  std::size_t state_count = 0, parameter_count = 0, metadata_count = 0;
  expect("steps");
  in >> steps;
  expect("state");
  in >> state_count;
  std::vector<std::string> state_names(state_count);
  for (auto& name : state_names) in >> name;
  expect("parameters");
  in >> parameter_count;
  std::map<std::string, matrix_extents> shapes;
  for (std::size_t p = 0; p < parameter_count && in; ++p) {
    std::string name;
    matrix_extents extents;
    in >> name >> extents.rows >> extents.cols;
    shapes[name] = extents;
  }
  expect("metadata");
  in >> metadata_count;
  std::map<std::string, std::string> metadata;
  for (std::size_t m = 0; m < metadata_count && in; ++m) {
    std::string key, value;
    in >> key;
    std::getline(in, value);
    metadata[key] = value.substr(value.find_first_not_of(' ') == std::string::npos ? value.size()
                                                                                   : value.find_first_not_of(' '));
  }
  if (!in) throw fail("the manifest is truncated");

  // The model must be the checkpoint's: the same names with the same global shapes.
  const auto records = update.parameters();
  for (const auto& record : records) {
    const auto saved = shapes.find(record.name);
    if (saved == shapes.end()) throw fail("it has no parameter \"" + record.name + "\" (another model?)");
    if (saved->second != record.extents)
      throw fail("parameter \"" + record.name + "\" is " + std::to_string(saved->second.rows) + "x" +
                 std::to_string(saved->second.cols) + " there and " + std::to_string(record.extents.rows) + "x" +
                 std::to_string(record.extents.cols) + " in this model");
  }
  if (shapes.size() != records.size())
    throw fail("it has " + std::to_string(shapes.size()) + " parameters, this model " + std::to_string(records.size()));
  if (!std::ranges::equal(state_names, Optimizer::state_names))
    throw fail("its optimizer state (" + std::to_string(state_names.size()) +
               " variables) is not this optimizer's (" + std::to_string(Optimizer::state_names.size()) + ")");

  // Every file, checked, and an index of its blocks by tensor name.
  std::vector<std::vector<std::byte>> contents;
  std::map<std::string, std::vector<detail::saved_block>> blocks;
  std::string word;
  while (in >> word) {
    if (word != "file") throw fail("the manifest is malformed (expected \"file\", found \"" + word + "\")");
    std::string name;
    std::uint64_t size = 0, checksum = 0;
    if (!(in >> name >> size >> checksum)) throw fail("the manifest's file list is truncated");
    contents.push_back(detail::read_whole_file(folder / name, rank));
    const auto& bytes = contents.back();
    if (bytes.size() != size || detail::fnv1a(bytes) != checksum)
      throw fail(name + " is damaged: " + std::to_string(bytes.size()) + " bytes, " + std::to_string(size) +
                 " expected" + (bytes.size() == size ? ", checksum differs" : ""));
    for (std::size_t at = 0; at < bytes.size();) {
      std::uint32_t length = 0;
      std::int64_t header_values[4];
      const auto read = [&](void* into, std::size_t count) {
        if (at + count > bytes.size()) throw fail(name + " ends inside a block");
        std::memcpy(into, bytes.data() + at, count);
        at += count;
      };
      read(&length, sizeof length);
      std::string tensor(length, '\0');
      read(tensor.data(), length);
      read(header_values, sizeof header_values);
      detail::saved_block block{header_values[0], header_values[1], header_values[2], header_values[3],
                                reinterpret_cast<const float*>(bytes.data() + at)};
      const auto count = static_cast<std::size_t>(block.rows * block.cols) * sizeof(float);
      if (block.rows < 0 || block.cols < 0 || at + count > bytes.size()) throw fail(name + " ends inside a block");
      at += count;
      blocks[tensor].push_back(block);
    }
  }

  // This rank's blocks of one named tensor, assembled from every saved block that meets them.
  const auto assemble = [&](const parameter_record& record, const std::string& name) {
    std::vector<float> storage;
    const auto starts = detail::block_starts(record);
    storage.assign(starts.empty() ? 0 : starts.back() + static_cast<std::size_t>(record.blocks.back().stored_elements()),
                   0.0f);
    std::int64_t filled = 0, owned = 0;
    for (std::size_t b = 0; b < record.blocks.size(); ++b) {
      const block_info& mine = record.blocks[b];
      owned += mine.elements();
      for (const detail::saved_block& saved : blocks[name]) {
        const std::int64_t r0 = std::max(mine.row_offset, saved.row_offset);
        const std::int64_t r1 = std::min(mine.row_offset + mine.rows, saved.row_offset + saved.rows);
        const std::int64_t c0 = std::max(mine.col_offset, saved.col_offset);
        const std::int64_t c1 = std::min(mine.col_offset + mine.cols, saved.col_offset + saved.cols);
        if (r0 >= r1 || c0 >= c1) continue;
        for (std::int64_t r = r0; r < r1; ++r)
          std::memcpy(storage.data() + starts[b] + static_cast<std::size_t>((r - mine.row_offset) * mine.stored_cols + (c0 - mine.col_offset)),
                      saved.values + (r - saved.row_offset) * saved.cols + (c0 - saved.col_offset),
                      static_cast<std::size_t>(c1 - c0) * sizeof(float));
        filled += (r1 - r0) * (c1 - c0);
      }
    }
    if (filled != owned)
      throw fail("its blocks of \"" + name + "\" cover " + std::to_string(filled) + " of the " + std::to_string(owned) +
                 " elements this rank holds");
    return storage;
  };
  for (std::size_t t = 0; t < records.size(); ++t) {
    update.set_weights(t, assemble(records[t], records[t].name));
    for (std::size_t k = 0; k < state_names.size(); ++k)
      update.set_state(k, t, assemble(records[t], detail::state_tensor_name(records[t].name, state_names[k])));
  }
  update.set_steps_done(steps);
  metadata["steps"] = std::to_string(steps);
  return metadata;
} catch (...) {
  rethrow_within_call(world.world_rank(), call_text("load_model_checkpoint", path.string()));
}

}  // namespace shardwise::optim
