#pragma once
// Checkpoints of a model's training state that any mesh can load: every parameter (its float32
// weights: a bf16 model's master weights) and each of its optimizer state variables saved as a global
// named tensor ("blocks.0.mlp.expand.weight", "blocks.0.mlp.expand.weight/exp_avg"), in blocks that
// carry their global offsets, as PyTorch's distributed checkpoint does.
//
//   save_model_checkpoint(dir, update, mesh.data(), world, {{"seed", "1"}});
//   auto metadata = load_model_checkpoint(dir, update, world);     // on this run's mesh, any other's save
//
// A model with embedding tables (a DLRM) saves them beside the dense parameters, with their sparse
// update (optim/sparse_update.hpp): each table a global tensor ("embedding.tables.3", rows x dimension)
// whose pieces are blocks of rows, and each value of its rows' optimizer state a column beside it
// ("embedding.tables.3/sum_of_mean_squares", rows x 1). They load on any rank count, table-wise or
// row-wise, as the dense parameters load on any mesh.
//
//   save_model_checkpoint(dir, dense_update, table_update, mesh.data(), world);
//   load_model_checkpoint(dir, dense_update, table_update, world);
//
// save (collective over `world`): the state is gathered over the data replicas (the update may be
// sharded), then the ranks of replica 0 that hold the counted copy of a block (optim/sharded.hpp: one
// copy among the tensor-parallel replicas) write their blocks, one file per rank; rank 0 writes the
// manifest — steps, every parameter's name and global shape, the state names, the tables' names,
// shapes and row state names (where the model has tables: every rank writes its own pieces, which no
// other rank holds), the caller's metadata,
// beside every file's size and CRC-32C. The protocol of checkpoint_files.hpp commits it: everything
// goes into `<dir>/step-<N>.tmp/`, renamed to `<dir>/step-<N>/` once complete and flushed, then
// `<dir>/latest` (naming that folder) is replaced atomically. A save never touches an earlier step's
// folder, so a crash at any point leaves the last complete checkpoint loadable; the `keep` newest
// folders are kept.
//
// load (no collective): reads the manifest of `<dir>/latest` (or of a step folder given directly),
// checks that the model's parameters are the checkpoint's by name and global shape, verifies every
// file's size and checksum, and fills this rank's blocks of weights and state from the saved blocks
// that intersect them — so the mesh, the layouts and the padding may all differ from the saving run's.
// Values are copied, never combined: a load is bit-exact. Values are in the machine's byte order.
//
// load_model_weights(dir, model, world) loads the weights alone into a model with no update (any
// optimizer's checkpoint): to evaluate or sample it, or to train on with a fresh optimizer.
//
// read_model_checkpoint_summary(dir) reads the manifest alone — the steps, the shapes, the metadata — so
// that a program can build the model a checkpoint was saved from (its sizes kept in the metadata)
// before it loads it.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "shardwise/comm/communicator.hpp"
#include "shardwise/core/element_memory.hpp"
#include "shardwise/core/error.hpp"
#include "shardwise/layout/layout.hpp"
#include "shardwise/nn/sparse_parameter.hpp"
#include "shardwise/optim/checkpoint_files.hpp"
#include "shardwise/optim/model_parameters.hpp"
#include "shardwise/optim/sharded.hpp"
#include "shardwise/optim/sparse_update.hpp"

namespace shardwise::optim {

// What a model checkpoint says of itself in its manifest: enough to build the model it was saved from
// before loading it (read_model_checkpoint_summary below).
struct model_checkpoint_summary {
  long steps = 0;
  std::vector<std::string> state_names;              // the optimizer's, per parameter
  std::map<std::string, matrix_extents> parameters;  // global shapes, by name
  std::map<std::string, matrix_extents> tables;      // the embedding tables' (a DLRM's), by name
  std::vector<std::string> table_state_names;        // the sparse optimizer's, per row
  std::map<std::string, std::string> metadata;       // the caller's, as saved
};

namespace detail {

inline constexpr std::string_view model_manifest_header = "shardwise-model-checkpoint 2";

// One saved block: a rectangle of a named global tensor and where its elements lie in a file.
struct saved_block {
  std::int64_t row_offset = 0, col_offset = 0, rows = 0, cols = 0;
  const std::byte* values = nullptr;  // rows x cols floats, row-major, in the machine's byte order
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

// Reads the blocks of one file, each checked to lie inside a tensor the manifest lists.
inline void index_blocks(std::span<const std::byte> bytes, const std::string& file,
                         const std::map<std::string, matrix_extents>& tensors,
                         std::map<std::string, std::vector<saved_block>>& blocks, const checkpoint_call& call) {
  byte_reader in(bytes, file, call);
  while (!in.done()) {
    const auto name_bytes = in.take(in.value<std::uint32_t>());
    const std::string name(reinterpret_cast<const char*>(name_bytes.data()), name_bytes.size());
    const auto header = in.value<std::array<std::int64_t, 4>>();
    saved_block block{header[0], header[1], header[2], header[3], nullptr};
    const auto tensor = tensors.find(name);
    if (tensor == tensors.end())
      throw call.error(file + " holds a block of \"" + printable(name) + "\", a tensor the manifest does not list");
    const auto within = [](std::int64_t offset, std::int64_t extent, std::int64_t whole) {
      return offset >= 0 && offset <= whole && extent >= 0 && extent <= whole - offset;
    };
    const matrix_extents whole = tensor->second;
    if (!within(block.row_offset, block.rows, whole.rows) || !within(block.col_offset, block.cols, whole.cols))
      throw call.error(file + " holds a block of \"" + name + "\" at (" + std::to_string(block.row_offset) + ", " +
                       std::to_string(block.col_offset) + ") of " + extents_string(block.rows, block.cols) +
                       ", outside its " + extents_string(whole));
    block.values = in.take(static_cast<std::uint64_t>(block.rows * block.cols) * sizeof(float)).data();
    blocks[name].push_back(block);
  }
}

// A model's embedding tables as a checkpoint holds them: every table of the model (from every rank's
// pieces) by name and global shape, and the names of its rows' optimizer state. A model without tables
// has none, and its manifest no tables line.
struct table_section {
  std::map<std::string, matrix_extents> tables;
  std::vector<std::string_view> state_names;
};

// A table piece as a block of the global tensor `name` of `columns` columns: the table itself, or one
// value of its rows' state.
[[nodiscard]] inline parameter_record piece_record(const std::string& name, const nn::sparse_parameter<float>& piece,
                                                   std::int64_t columns) {
  return {name,
          {piece.table_rows, columns},
          {block_info{piece.first_row, 0, piece.rows(), columns, piece.rows(), columns}},
          true};
}

// "name rows cols" lines, as the manifest lists parameters and tables.
[[nodiscard]] inline std::string shape_line(const std::string& name, matrix_extents extents, std::string_view what,
                                            const checkpoint_call& call) {
  return std::string(manifest_word(name, what, call)) + " " + std::to_string(extents.rows) + " " +
         std::to_string(extents.cols) + "\n";
}

// The manifest's text after its header: the steps, the optimizer's state names, every parameter's name
// and global shape, the tables (where the model has any), the caller's metadata.
[[nodiscard]] inline std::string model_description(long steps, std::span<const std::string_view> state_names,
                                                   std::span<const parameter_record> records,
                                                   const table_section& tables,
                                                   const std::map<std::string, std::string>& metadata,
                                                   const checkpoint_call& call) {
  std::string description = "steps " + std::to_string(steps) + "\n" + state_names_line(state_names) + "parameters " +
                            std::to_string(records.size()) + "\n";
  for (const auto& record : records) description += shape_line(record.name, record.extents, "a parameter's name", call);
  if (!tables.tables.empty()) {
    description += "tables " + std::to_string(tables.tables.size()) + " " + state_names_line(tables.state_names);
    for (const auto& [name, extents] : tables.tables) description += shape_line(name, extents, "a table's name", call);
  }
  description += "metadata " + std::to_string(metadata.size()) + "\n";
  for (const auto& [key, value] : metadata) {
    if (value.find_first_of("\n\r") != std::string::npos)
      throw argument_error(call.rank, call.operation, "metadata \"" + key + "\" is not one line");
    description += std::string(manifest_word(key, "a metadata key", call)) + " " + value + "\n";
  }
  return description;
}

// What a rank writes: the blocks of the parameters whose counted copy it holds, their float32 weights
// (weights[t]) and each state variable (states[t][k]).
[[nodiscard]] inline std::vector<std::byte> counted_blocks(std::span<const parameter_record> records,
                                                           std::span<const std::string_view> state_names,
                                                           std::span<const std::span<const float>> weights,
                                                           const std::vector<std::vector<std::vector<float>>>& states) {
  std::vector<std::byte> bytes;
  for (std::size_t t = 0; t < records.size(); ++t) {
    if (!records[t].counted) continue;
    append_blocks(bytes, records[t].name, records[t], weights[t]);
    for (std::size_t k = 0; k < state_names.size(); ++k)
      append_blocks(bytes, state_tensor_name(records[t].name, state_names[k]), records[t], states[t][k]);
  }
  return bytes;
}

// `count` lines of "name rows cols": the parameters' or the tables' (`kind`) global shapes.
inline std::map<std::string, matrix_extents> read_shapes(text_reader& in, std::size_t count, const std::string& kind) {
  std::map<std::string, matrix_extents> shapes;
  for (std::size_t p = 0; p < count; ++p) {
    const std::string name(in.word());
    matrix_extents extents;
    extents.rows = in.number<std::int64_t>("a " + kind + "'s rows");
    extents.cols = in.number<std::int64_t>("a " + kind + "'s columns");
    in.end_line();
    if (!shapes.emplace(name, extents).second) throw in.malformed(kind + " \"" + name + "\" is listed twice");
  }
  return shapes;
}

// The manifest after the file list: the steps, the optimizer's state names, every parameter's name and
// global shape, the tables (where the model has any), the caller's metadata.
inline model_checkpoint_summary read_summary(text_reader& in) {
  model_checkpoint_summary summary;
  in.expect("steps");
  summary.steps = in.number<long>("the step count");
  in.end_line();
  summary.state_names = read_state_names(in);
  in.expect("parameters");
  const std::size_t parameter_count = in.count("the parameter count", 6);
  in.end_line();
  summary.parameters = read_shapes(in, parameter_count, "parameter");
  std::string_view section = in.word();
  if (section == "tables") {
    const std::size_t table_count = in.count("the table count", 6);
    summary.table_state_names = read_state_names(in);
    summary.tables = read_shapes(in, table_count, "table");
    section = in.word();
  }
  if (section != "metadata") throw in.malformed("\"metadata\" expected, \"" + printable(section) + "\" found");
  const std::size_t metadata_count = in.count("the metadata count", 3);
  in.end_line();
  for (std::size_t m = 0; m < metadata_count; ++m) {
    const std::string key(in.word());
    summary.metadata[key] = in.rest_of_line();
  }
  in.expect_end();
  return summary;
}

// A model checkpoint read from disk and checked against a model's parameters and its optimizer's state
// names (none given: the weights alone are read, and any optimizer's state is passed over): the manifest,
// every file (size and checksum), and an index of the saved blocks by tensor name.
class model_checkpoint_contents {
 public:
  model_checkpoint_contents(const std::filesystem::path& path, std::span<const parameter_record> records,
                            std::optional<std::span<const std::string_view>> optimizer_state_names,
                            const table_section& model_tables, const checkpoint_call& call)
      : call_(call), checkpoint_(path, model_manifest_header, call_), summary_(read_summary(checkpoint_.manifest())) {
    const auto& [steps, state_names, shapes, tables, table_state_names, metadata] = summary_;
    // The model must be the checkpoint's: the same names with the same global shapes.
    std::vector<std::pair<std::string, matrix_extents>> model_shapes;  // in the model's order
    for (const auto& record : records) model_shapes.emplace_back(record.name, record.extents);
    expect_same(shapes, model_shapes, "parameter");
    if (optimizer_state_names && !std::ranges::equal(state_names, *optimizer_state_names))
      throw fail("its optimizer state is " + detail::names_text(state_names) + ", this optimizer keeps " +
                 detail::names_text(*optimizer_state_names));
    expect_same(tables, model_tables.tables, "table");
    if (optimizer_state_names && !model_tables.tables.empty() &&
        !std::ranges::equal(table_state_names, model_tables.state_names))
      throw fail("its tables' optimizer state is " + detail::names_text(table_state_names) +
                 " per row, this sparse optimizer keeps " + detail::names_text(model_tables.state_names));

    // Every file, checked, and an index of its blocks by tensor name: each parameter and its state,
    // each table and its rows' state.
    std::map<std::string, matrix_extents> tensors;
    for (const auto& [name, extents] : shapes) {
      tensors[name] = extents;
      for (const auto& state : state_names) tensors[state_tensor_name(name, state)] = extents;
    }
    for (const auto& [name, extents] : tables) {
      tensors[name] = extents;
      for (const auto& state : table_state_names) tensors[state_tensor_name(name, state)] = {extents.rows, 1};
    }
    for (const auto& file : checkpoint_.files()) {
      contents_.push_back(checkpoint_.read(file));
      index_blocks(contents_.back(), checkpoint_.file_path(file), tensors, blocks_, call);
    }
  }

  // The saved blocks point into the files' bytes held here.
  model_checkpoint_contents(const model_checkpoint_contents&) = delete;
  model_checkpoint_contents& operator=(const model_checkpoint_contents&) = delete;

  [[nodiscard]] const model_checkpoint_summary& summary() const noexcept { return summary_; }

  // This rank's blocks of the tensor `name`, laid out as `record` stores them, assembled from every saved
  // block that meets them.
  [[nodiscard]] std::vector<float> assemble(const parameter_record& record, const std::string& name) const {
    std::vector<float> storage;
    const auto starts = block_starts(record);
    storage.assign(
        starts.empty() ? 0 : starts.back() + static_cast<std::size_t>(record.blocks.back().stored_elements()), 0.0f);
    const auto saved_blocks = blocks_.find(name);
    std::int64_t filled = 0, owned = 0;
    for (std::size_t b = 0; b < record.blocks.size(); ++b) {
      const block_info& mine = record.blocks[b];
      owned += mine.elements();
      if (saved_blocks == blocks_.end()) continue;
      for (const saved_block& saved : saved_blocks->second) {
        const std::int64_t r0 = std::max(mine.row_offset, saved.row_offset);
        const std::int64_t r1 = std::min(mine.row_offset + mine.rows, saved.row_offset + saved.rows);
        const std::int64_t c0 = std::max(mine.col_offset, saved.col_offset);
        const std::int64_t c1 = std::min(mine.col_offset + mine.cols, saved.col_offset + saved.cols);
        if (r0 >= r1 || c0 >= c1) continue;
        for (std::int64_t r = r0; r < r1; ++r)
          std::memcpy(
              storage.data() + starts[b] +
                  static_cast<std::size_t>((r - mine.row_offset) * mine.stored_cols + (c0 - mine.col_offset)),
              saved.values + static_cast<std::size_t>((r - saved.row_offset) * saved.cols + (c0 - saved.col_offset)) *
                                 sizeof(float),
              static_cast<std::size_t>(c1 - c0) * sizeof(float));
        filled += (r1 - r0) * (c1 - c0);
      }
    }
    if (filled != owned)
      throw fail("its blocks of \"" + name + "\" cover " + std::to_string(filled) + " of the " + std::to_string(owned) +
                 " elements this rank holds");
    return storage;
  }

 private:
  [[nodiscard]] checkpoint_error fail(const std::string& what) const {
    return call_.error(checkpoint_.path().string() + ": " + what);
  }

  // The model's parameters or tables (`kind`: (name, shape) pairs, the first that differs named) are
  // the checkpoint's: the same names, the same shapes.
  template <class Shapes>
  void expect_same(const std::map<std::string, matrix_extents>& saved, const Shapes& model,
                   const std::string& kind) const {
    for (const auto& [name, extents] : model) {
      const auto found = saved.find(name);
      if (found == saved.end()) throw fail("it has no " + kind + " \"" + name + "\" (another model?)");
      if (found->second != extents)
        throw fail(kind + " \"" + name + "\" is " + extents_string(found->second) + " there and " +
                   extents_string(extents) + " in this model");
    }
    if (saved.size() != model.size())
      throw fail("it has " + std::to_string(saved.size()) + " " + kind + "s, this model " +
                 std::to_string(std::ranges::size(model)));
  }

  checkpoint_call call_;
  checkpoint_folder checkpoint_;
  model_checkpoint_summary summary_;
  std::vector<std::vector<std::byte>> contents_;  // the files' bytes, which the saved blocks point into
  std::map<std::string, std::vector<saved_block>> blocks_;
};

// Every table of the model, gathered from the `pieces` each rank of `world` holds ((name, pointer to an
// nn::sparse_parameter<float>) pairs; collective), with the sparse optimizer's `state_names`. Nothing
// throws before the collectives: the ranks read the same lines after them, so they refuse them together
// (the manifest refuses a name that is not one word).
template <class Pieces, communicator World>
[[nodiscard]] table_section every_table(const Pieces& pieces, std::vector<std::string_view> state_names, World& world,
                                        const checkpoint_call& call) {
  std::string mine;
  for (const auto& [name, piece] : pieces)
    mine += name + " " + std::to_string(piece->table_rows) + " " + std::to_string(piece->dimension()) + "\n";
  auto longest = static_cast<std::int64_t>(mine.size());
  world.all_reduce(std::span<std::int64_t>(&longest, 1), op::max);
  mine.resize(static_cast<std::size_t>(longest), '\n');
  std::string all(static_cast<std::size_t>(longest) * static_cast<std::size_t>(world.size()), '\n');
  if (longest > 0) world.all_gather(std::span<const char>(mine), std::span<char>(all));

  table_section section{{}, std::move(state_names)};
  for (std::size_t at = 0; at < all.size();) {
    const std::size_t end = all.find('\n', at);
    const std::string line = all.substr(at, end - at);
    at = end + 1;
    if (line.empty()) continue;
    const std::size_t columns = line.rfind(' '), rows = line.rfind(' ', columns - 1);
    const std::string name = line.substr(0, rows);
    const matrix_extents extents{std::stoll(line.substr(rows + 1, columns - rows - 1)),
                                 std::stoll(line.substr(columns + 1))};
    if (const auto [known, added] = section.tables.emplace(name, extents); !added && known->second != extents)
      throw call.error("the ranks hold table \"" + name + "\" as " + extents_string(known->second) + " and as " +
                       extents_string(extents));
  }
  return section;
}

// The pieces a sparse update holds, and the names of their rows' state, collected from every rank.
template <class SparseOptimizer, communicator World>
[[nodiscard]] table_section every_table(const sparse_update<SparseOptimizer, float>& tables, World& world,
                                        const checkpoint_call& call) {
  std::vector<std::pair<std::string, const nn::sparse_parameter<float>*>> pieces;
  for (std::size_t t = 0; t < tables.table_count(); ++t) pieces.emplace_back(tables.name(t), &tables.parameter(t));
  return every_table(pieces, {SparseOptimizer::state_names.begin(), SparseOptimizer::state_names.end()}, world, call);
}

// What a rank writes of its table pieces: each piece's rows, and each value of their state as a column.
template <class SparseOptimizer>
void append_table_blocks(std::vector<std::byte>& bytes, const sparse_update<SparseOptimizer, float>& tables) {
  constexpr std::size_t per_row = state_count<SparseOptimizer>;
  for (std::size_t t = 0; t < tables.table_count(); ++t) {
    const auto& piece = tables.parameter(t);
    const std::string& name = tables.name(t);
    append_blocks(bytes, name, piece_record(name, piece, piece.dimension()), piece.values());
    const auto state = tables.state(t);
    for (std::size_t k = 0; k < per_row; ++k) {
      std::vector<float> column(static_cast<std::size_t>(piece.rows()));
      for (std::size_t r = 0; r < column.size(); ++r) column[r] = state[r * per_row + k];
      append_blocks(bytes, state_tensor_name(name, SparseOptimizer::state_names[k]), piece_record(name, piece, 1),
                    column);
    }
  }
}

// Fills a table piece's rows from the saved blocks that meet them.
inline void load_table_values(const model_checkpoint_contents& saved, const std::string& name,
                              nn::sparse_parameter<float>& piece) {
  std::ranges::copy(saved.assemble(piece_record(name, piece, piece.dimension()), name), piece.values().begin());
}

// Fills this rank's table pieces and their state from the saved blocks that meet them.
template <class SparseOptimizer>
void load_table_blocks(const model_checkpoint_contents& saved, sparse_update<SparseOptimizer, float>& tables) {
  constexpr std::size_t per_row = state_count<SparseOptimizer>;
  for (std::size_t t = 0; t < tables.table_count(); ++t) {
    auto& piece = tables.parameter(t);
    const std::string& name = tables.name(t);
    load_table_values(saved, name, piece);
    const auto state = tables.state(t);
    for (std::size_t k = 0; k < per_row; ++k) {
      const std::string state_name = state_tensor_name(name, SparseOptimizer::state_names[k]);
      const auto column = saved.assemble(piece_record(state_name, piece, 1), state_name);
      for (std::size_t r = 0; r < column.size(); ++r) state[r * per_row + k] = column[r];
    }
  }
}

// A save with the tables' section and this rank's bytes of its table pieces (none without tables).
template <class Optimizer, weight_update Mode, class Weight, communicator Data, communicator World>
void save_model(const std::filesystem::path& directory, const data_parallel_update<Optimizer, Mode, Weight>& update,
                const table_section& tables, std::vector<std::byte> bytes, Data& data, World& world,
                const std::map<std::string, std::string>& metadata, int keep, const checkpoint_call& call) {
  const auto records = update.parameters();
  constexpr auto state_names = Optimizer::state_names;
  const std::string description = model_description(update.steps_done(), state_names, records, tables, metadata, call);

  // Every rank of every replica takes part in gathering the state, and a bf16 model's float32 master
  // weights (a float model's weights are whole on every replica already); replica 0's counted copies
  // write.
  std::vector<std::vector<float>> masters(records.size());
  std::vector<std::span<const float>> weights(records.size());
  std::vector<std::vector<std::vector<float>>> states(records.size());
  for (std::size_t t = 0; t < records.size(); ++t) {
    if constexpr (std::is_same_v<Weight, float>) {
      weights[t] = update.weights(t);
    } else {
      masters[t] = update.gather_master_weights(data, t);
      weights[t] = masters[t];
    }
    for (std::size_t k = 0; k < state_names.size(); ++k) states[t].push_back(update.gather_state(data, k, t));
  }
  if (data.rank() == 0) {
    const auto dense = counted_blocks(records, state_names, weights, states);
    bytes.insert(bytes.begin(), dense.begin(), dense.end());
  }
  save_checkpoint_files(world, directory, update.steps_done(), model_manifest_header, description,
                        bytes.empty() ? std::nullopt : std::optional<std::span<const std::byte>>(bytes), keep, call);
}

// What a load returns: the caller's metadata, with "steps" added.
[[nodiscard]] inline std::map<std::string, std::string> metadata_with_steps(const model_checkpoint_summary& summary) {
  auto metadata = summary.metadata;
  metadata["steps"] = std::to_string(summary.steps);
  return metadata;
}

// A load that checks the tables against `tables` and fills them by load_tables(saved).
template <class Optimizer, weight_update Mode, class Weight, communicator World, class LoadTables>
std::map<std::string, std::string> load_model(const std::filesystem::path& path,
                                              data_parallel_update<Optimizer, Mode, Weight>& update,
                                              const table_section& tables, World& world, const checkpoint_call& call,
                                              LoadTables&& load_tables) {
  std::map<std::string, std::string> metadata;
  load_together(world, path, call, [&] {
    const auto records = update.parameters();
    const model_checkpoint_contents saved(path, records, Optimizer::state_names, tables, call);
    for (std::size_t t = 0; t < records.size(); ++t) {
      update.set_weights(t, saved.assemble(records[t], records[t].name));
      for (std::size_t k = 0; k < Optimizer::state_names.size(); ++k)
        update.set_state(
            k, t, saved.assemble(records[t], state_tensor_name(records[t].name, saved.summary().state_names[k])));
    }
    load_tables(saved);
    update.set_steps_done(saved.summary().steps);
    metadata = metadata_with_steps(saved.summary());
    return saved.summary().steps;
  });
  return metadata;
}

}  // namespace detail

// Collective over `world` (every rank of every replica). Returns once the checkpoint is committed; a
// failure on any rank throws checkpoint_error on every rank and leaves earlier checkpoints as they were.
// `data` is the update's communicator (the replicas), `world` every rank of the run. Metadata keys are
// single words; values are one line.
template <class Optimizer, weight_update Mode, class Weight, communicator Data, communicator World>
void save_model_checkpoint(const std::filesystem::path& directory,
                           const data_parallel_update<Optimizer, Mode, Weight>& update, Data& data, World& world,
                           const std::map<std::string, std::string>& metadata = {}, int keep = 2) try {
  const detail::checkpoint_call call{world.world_rank(), "save_model_checkpoint"};
  detail::save_model(directory, update, {}, {}, data, world, metadata, keep, call);
} catch (...) {
  rethrow_within_call(world.world_rank(), call_text("save_model_checkpoint", directory.string(),
                                                    "step " + std::to_string(update.steps_done())));
}

// The same with a model's embedding tables and their sparse update: every rank writes its pieces.
template <class Optimizer, weight_update Mode, class Weight, class SparseOptimizer, class TableValue, communicator Data,
          communicator World>
void save_model_checkpoint(const std::filesystem::path& directory,
                           const data_parallel_update<Optimizer, Mode, Weight>& update,
                           const sparse_update<SparseOptimizer, TableValue>& tables, Data& data, World& world,
                           const std::map<std::string, std::string>& metadata = {}, int keep = 2) try {
  static_assert(std::is_same_v<TableValue, float>,
                "save_model_checkpoint: a checkpoint holds float32 tables; these tables' values are of another type");
  if constexpr (std::is_same_v<TableValue, float>) {  // one error where they are not, the sentence above
    const detail::checkpoint_call call{world.world_rank(), "save_model_checkpoint"};
    std::vector<std::byte> bytes;
    detail::append_table_blocks(bytes, tables);
    detail::save_model(directory, update, detail::every_table(tables, world, call), std::move(bytes), data, world,
                       metadata, keep, call);
  }
} catch (...) {
  rethrow_within_call(world.world_rank(), call_text("save_model_checkpoint", directory.string(),
                                                    "step " + std::to_string(update.steps_done())));
}

// Loads the checkpoint at `path` (a directory with `latest`, or a step folder) into `update` and so
// into the model it was built from. Returns the saved metadata, with "steps" added. Collective over
// `world`: a failure on any rank, or ranks given different checkpoints, throw on every rank.
template <class Optimizer, weight_update Mode, class Weight, communicator World>
std::map<std::string, std::string> load_model_checkpoint(const std::filesystem::path& path,
                                                         data_parallel_update<Optimizer, Mode, Weight>& update,
                                                         World& world) try {
  const detail::checkpoint_call call{world.world_rank(), "load_model_checkpoint"};
  return detail::load_model(path, update, {}, world, call, [](const detail::model_checkpoint_contents&) {});
} catch (...) {
  rethrow_within_call(world.world_rank(), call_text("load_model_checkpoint", path.string()));
}

// The same with a model's embedding tables and their sparse update, on any rank count and sharding.
template <class Optimizer, weight_update Mode, class Weight, class SparseOptimizer, class TableValue,
          communicator World>
std::map<std::string, std::string> load_model_checkpoint(const std::filesystem::path& path,
                                                         data_parallel_update<Optimizer, Mode, Weight>& update,
                                                         sparse_update<SparseOptimizer, TableValue>& tables,
                                                         World& world) try {
  static_assert(std::is_same_v<TableValue, float>,
                "load_model_checkpoint: a checkpoint holds float32 tables; these tables' values are of another type");
  if constexpr (std::is_same_v<TableValue, float>) {  // one error where they are not, the sentence above
    const detail::checkpoint_call call{world.world_rank(), "load_model_checkpoint"};
    return detail::load_model(
        path, update, detail::every_table(tables, world, call), world, call,
        [&](const detail::model_checkpoint_contents& saved) { detail::load_table_blocks(saved, tables); });
  }
} catch (...) {
  rethrow_within_call(world.world_rank(), call_text("load_model_checkpoint", path.string()));
}

// Loads the weights alone of the checkpoint at `path` (a directory with `latest`, or a step folder) into
// `model`'s parameters, and into its embedding tables where it has any (for_each_sparse_parameter), with
// no update: to evaluate or sample a checkpoint without building an optimizer's state, or to train on
// from its weights with a fresh optimizer of any kind (Megatron-LM's --finetune; a full load refuses
// another optimizer's state). The checks are load_model_checkpoint's — the same parameter names and
// global shapes, every file's size and checksum — on any mesh; a bf16 model takes the saved float32
// weights rounded, before an update is built from it: the update's float32 master weights, taken from
// the model's values when it is built, are out of the load's reach afterwards (refused). Returns the
// saved metadata with "steps" added. Collective over `world`: a failure on any rank throws on every rank.
template <parameterised Model, communicator World>
std::map<std::string, std::string> load_model_weights(const std::filesystem::path& path, Model& model,
                                                      World& world) try {
  const detail::checkpoint_call call{world.world_rank(), "load_model_weights"};
  std::vector<parameter_record> records;
  model.for_each_parameter([&](const std::string& name, auto& p) {
    using element = typename std::remove_cvref_t<decltype(p.value)>::value_type;
    if constexpr (!std::is_same_v<element, float>)
      if (p.value.is_bound())
        throw argument_error(world.world_rank(), "load_model_weights",
                             "parameter \"" + name +
                                 "\" is bound to an update, whose float32 master weights this load would not reach: "
                                 "load the weights before building the update");
    records.push_back(detail::record_of(name, p.value));
  });
  std::vector<std::pair<std::string, nn::sparse_parameter<float>*>> pieces;
  if constexpr (requires { model.for_each_sparse_parameter([](const std::string&, auto&) {}); }) {
    static_assert(sparse_parameterised<Model, float>,
                  "load_model_weights: a checkpoint holds float32 tables; this model's tables are of another type");
    model.for_each_sparse_parameter(
        [&](const std::string& name, nn::sparse_parameter<float>& piece) { pieces.emplace_back(name, &piece); });
  }
  const auto tables = detail::every_table(pieces, {}, world, call);

  std::map<std::string, std::string> metadata;
  detail::load_together(world, path, call, [&] {
    const detail::model_checkpoint_contents saved(path, records, std::nullopt, tables, call);
    std::size_t t = 0;
    model.for_each_parameter([&](const std::string&, auto& p) {
      using element = typename std::remove_cvref_t<decltype(p.value)>::value_type;
      const auto values = saved.assemble(records[t], records[t].name);
      ++t;
      if (!element_memory::stored_on_this_thread()) return;  // shapes only: no values to set
      std::ranges::transform(values, p.value.data().begin(), [](float v) { return static_cast<element>(v); });
    });
    for (const auto& [name, piece] : pieces) detail::load_table_values(saved, name, *piece);
    metadata = detail::metadata_with_steps(saved.summary());
    return saved.summary().steps;
  });
  return metadata;
} catch (...) {
  rethrow_within_call(world.world_rank(), call_text("load_model_weights", path.string()));
}

// What the checkpoint at `path` (a directory with `latest`, or a step folder) says of itself, read from
// its manifest alone, with no model to load it into (no collective; the rank files are not read): what
// a program needs to build the model the checkpoint was saved from, as PyTorch's distributed
// checkpoint's read_metadata. Its errors name no rank.
inline model_checkpoint_summary read_model_checkpoint_summary(const std::filesystem::path& path) try {
  const detail::checkpoint_call call{-1, "read_model_checkpoint_summary"};
  detail::checkpoint_folder checkpoint(path, detail::model_manifest_header, call);
  return detail::read_summary(checkpoint.manifest());
} catch (...) {
  rethrow_within_call(-1, call_text("read_model_checkpoint_summary", path.string()));
}

}  // namespace shardwise::optim
