#pragma once
// Checkpoints of a data-parallel update's state, written shard by shard.
//
// save_checkpoint (a collective): replica r writes `shard-<r>.bin` with the elements of its block r —
// float32 master weights, then each state variable, tensor elements only (no padding), in flat order —
// followed by the per-tensor state; then rank 0 writes `manifest`, a text file with the format version,
// replica count, step count, bucket size, tensor shapes, state names and every shard's size and FNV-1a
// checksum. Every file is written atomically (a temporary beside it, fsync, rename, fsync of the
// directory), and the manifest last, so a checkpoint either has a manifest naming complete shards or
// is not a checkpoint.
//
// load_checkpoint (no collective): each replica reads the manifest and every shard, checks sizes and
// checksums, and takes the elements of the blocks it owns in its own layout, so a checkpoint saved by N
// replicas loads into M (resharding) bit-exactly. A missing, truncated or corrupted file is a
// checkpoint_error naming the file. Values are stored in the machine's byte order.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "shardwise/comm/communicator.hpp"
#include "shardwise/core/error.hpp"
#include "shardwise/optim/flat_layout.hpp"
#include "shardwise/optim/sharded.hpp"

namespace shardwise::optim {

// A checkpoint that cannot be written, or read back as it was written.
class checkpoint_error : public error {
  using error::error;
};

namespace detail {

inline constexpr std::string_view manifest_header = "shardwise-checkpoint 1";

[[nodiscard]] inline std::uint64_t fnv1a(std::span<const std::byte> bytes) noexcept {
  std::uint64_t hash = 14695981039346656037ull;
  for (const std::byte b : bytes) hash = (hash ^ static_cast<std::uint64_t>(b)) * 1099511628211ull;
  return hash;
}

[[nodiscard]] inline std::string shard_file_name(int replica) { return "shard-" + std::to_string(replica) + ".bin"; }

// Writes `bytes` to `path` so that `path` holds either its old content or all of the new one.
inline void write_atomically(const std::filesystem::path& path, std::span<const std::byte> bytes, int rank) {
  const auto fail = [&](const std::string& what) {
    throw checkpoint_error(rank, "save_checkpoint", what + " " + path.string() + ": " + std::strerror(errno));
  };
  std::filesystem::path temporary = path;
  temporary += ".tmp";
  const int file = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (file < 0) fail("cannot create a temporary file for");
  std::size_t written = 0;
  while (written < bytes.size()) {
    const ::ssize_t n = ::write(file, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(file);
      fail("cannot write");
    }
    written += static_cast<std::size_t>(n);
  }
  if (::fsync(file) != 0) {
    ::close(file);
    fail("cannot flush");
  }
  if (::close(file) != 0) fail("cannot close");
  if (std::rename(temporary.c_str(), path.c_str()) != 0) fail("cannot rename the temporary file to");
  const int directory = ::open(path.parent_path().empty() ? "." : path.parent_path().c_str(), O_RDONLY);
  if (directory >= 0) {  // make the rename itself durable
    ::fsync(directory);
    ::close(directory);
  }
}

[[nodiscard]] inline std::vector<std::byte> read_whole_file(const std::filesystem::path& path, int rank) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw checkpoint_error(rank, "load_checkpoint", "cannot open " + path.string() + " (missing?)");
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> bytes(chars.size());
  std::memcpy(bytes.data(), chars.data(), chars.size());
  return bytes;
}

// One shard as the manifest records it.
struct shard_record {
  std::uint64_t bytes = 0;
  std::uint64_t checksum = 0;
};

struct manifest {
  int replicas = 0;
  long steps = 0;
  std::size_t bucket_elements = 0;
  std::vector<parameter_shape> shapes;
  std::vector<std::string> state_names;
  std::vector<shard_record> shards;
};

[[nodiscard]] inline std::string to_text(const manifest& m) {
  std::ostringstream out;
  out << manifest_header << "\nreplicas " << m.replicas << "\nsteps " << m.steps << "\nbucket_elements "
      << m.bucket_elements << "\ntensors " << m.shapes.size() << '\n';
  for (const auto& shape : m.shapes) out << shape.rows << ' ' << shape.cols << '\n';
  out << "state " << m.state_names.size();
  for (const auto& name : m.state_names) out << ' ' << name;
  out << '\n';
  for (std::size_t r = 0; r < m.shards.size(); ++r)
    out << "shard " << r << ' ' << shard_file_name(static_cast<int>(r)) << ' ' << m.shards[r].bytes << ' '
        << m.shards[r].checksum << '\n';
  return out.str();
}

[[nodiscard]] inline manifest parse_manifest(const std::filesystem::path& path, int rank) {
  const auto bytes = read_whole_file(path, rank);
  std::istringstream in(std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  const auto malformed = [&](std::string_view where) {
    return checkpoint_error(rank, "load_checkpoint",
                            path.string() + " is not a valid manifest (at " + std::string(where) + ")");
  };
  const auto expect = [&](std::string_view word) {
    std::string token;
    if (!(in >> token) || token != word) throw malformed(word);
  };
  std::string header;
  std::getline(in, header);
  if (header != manifest_header) throw malformed("the header");
  manifest m;
  std::size_t tensors = 0;
  expect("replicas");
  in >> m.replicas;
  expect("steps");
  in >> m.steps;
  expect("bucket_elements");
  in >> m.bucket_elements;
  expect("tensors");
  if (!(in >> tensors) || m.replicas < 1) throw malformed("the replica or tensor count");
  m.shapes.resize(tensors);
  for (auto& shape : m.shapes)
    if (!(in >> shape.rows >> shape.cols)) throw malformed("a tensor shape");
  std::size_t state_count = 0;
  expect("state");
  in >> state_count;
  m.state_names.resize(state_count);
  for (auto& name : m.state_names)
    if (!(in >> name)) throw malformed("the state names");
  m.shards.resize(static_cast<std::size_t>(m.replicas));
  for (int r = 0; r < m.replicas; ++r) {
    int index = -1;
    std::string file;
    expect("shard");
    auto& shard = m.shards[static_cast<std::size_t>(r)];
    if (!(in >> index >> file >> shard.bytes >> shard.checksum) || index != r || file != shard_file_name(r))
      throw malformed("shard " + std::to_string(r));
  }
  return m;
}

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

// Writes the update's state under `directory` (created if needed). A collective over the update's
// replicas; every replica returns once the manifest is durable, or throws if any replica's write failed.
template <communicator C, class Optimizer, weight_update Mode, class Weight>
void save_checkpoint(C& comm, const data_parallel_update<Optimizer, Mode, Weight>& update,
                     const std::filesystem::path& directory) try {
  using access = detail::checkpoint_access;
  access::check_communicator(update, comm, "save_checkpoint");
  const int rank = comm.world_rank();
  std::exception_ptr failure;  // this rank's, raised again once every rank knows
  detail::shard_record mine;
  try {
    std::filesystem::create_directories(directory);
    const auto values = access::block_values(update);
    const auto bytes = std::as_bytes(std::span<const float>(values));
    detail::write_atomically(directory / detail::shard_file_name(comm.rank()), bytes, rank);
    mine = {bytes.size(), detail::fnv1a(bytes)};
  } catch (...) {
    failure = std::current_exception();
  }
  // Every replica learns whether all shards were written before anyone writes the manifest.
  const std::uint64_t failed = failure ? 1 : 0;
  std::vector<std::uint64_t> records(3 * static_cast<std::size_t>(comm.size()));
  const std::uint64_t own[3] = {mine.bytes, mine.checksum, failed};
  comm.all_gather(std::span<const std::uint64_t>(own), records);
  for (int r = 0; r < comm.size(); ++r)
    if (records[3 * static_cast<std::size_t>(r) + 2] != 0) {
      if (failure) rethrow_naming_rank<checkpoint_error>(failure, rank, "save_checkpoint");
      throw checkpoint_error(rank, "save_checkpoint", "replica " + std::to_string(r) + " could not write its shard");
    }

  if (comm.rank() == 0) {
    detail::manifest m{comm.size(),
                       update.steps_done(),
                       update.layout().bucket_elements(),
                       {update.layout().shapes().begin(), update.layout().shapes().end()},
                       {},
                       {}};
    for (const auto name : Optimizer::state_names) m.state_names.emplace_back(name);
    for (int r = 0; r < comm.size(); ++r)
      m.shards.push_back({records[3 * static_cast<std::size_t>(r)], records[3 * static_cast<std::size_t>(r) + 1]});
    const std::string text = detail::to_text(m);
    try {
      detail::write_atomically(directory / "manifest", std::as_bytes(std::span<const char>(text)), rank);
    } catch (...) {
      failure = std::current_exception();
    }
  }
  int manifest_failed = failure ? 1 : 0;
  comm.broadcast(std::span<int>(&manifest_failed, 1), 0);
  if (manifest_failed != 0) {
    if (failure) rethrow_naming_rank<checkpoint_error>(failure, rank, "save_checkpoint");
    throw checkpoint_error(rank, "save_checkpoint", "rank 0 could not write the manifest");
  }
} catch (...) {
  rethrow_within_call(comm.world_rank(), call_text("save_checkpoint", directory.string()));
}

// Restores the update's weights, state and step count from `directory`, whatever number of replicas
// saved it. The tensors and the optimizer's state variables must be those of the checkpoint.
template <communicator C, class Optimizer, weight_update Mode, class Weight>
void load_checkpoint(C& comm, data_parallel_update<Optimizer, Mode, Weight>& update,
                     const std::filesystem::path& directory) try {
  using access = detail::checkpoint_access;
  access::check_communicator(update, comm, "load_checkpoint");
  const int rank = comm.world_rank();
  const auto m = detail::parse_manifest(directory / "manifest", rank);
  const auto mismatch = [&](const std::string& what) {
    return checkpoint_error(rank, "load_checkpoint", (directory / "manifest").string() + ": " + what);
  };
  const auto& layout = update.layout();
  if (!std::ranges::equal(m.shapes, layout.shapes()))
    throw mismatch("its tensors are not the update's (count or shapes differ)");
  if (!std::ranges::equal(m.state_names, Optimizer::state_names))
    throw mismatch("its optimizer state variables are not the update's optimizer's");

  // Whole tensors, back to back: values[v][tensor_begin[t] + i].
  std::vector<std::size_t> tensor_begin;
  std::size_t elements = 0;
  for (const auto& shape : m.shapes) {
    tensor_begin.push_back(elements);
    elements += shape.size();
  }
  constexpr std::size_t kinds = 1 + state_count<Optimizer>;
  std::vector<std::vector<float>> values(kinds, std::vector<float>(elements));
  std::vector<float> tensor_state;

  const flat_layout saved(m.shapes, m.replicas, m.bucket_elements);
  for (int r = 0; r < m.replicas; ++r) {
    const auto path = directory / detail::shard_file_name(r);
    const auto bytes = detail::read_whole_file(path, rank);
    const auto& record = m.shards[static_cast<std::size_t>(r)];
    if (bytes.size() != record.bytes)
      throw checkpoint_error(rank, "load_checkpoint",
                             path.string() + " is truncated or overlong: " + std::to_string(bytes.size()) +
                                 " bytes, the manifest says " + std::to_string(record.bytes));
    if (detail::fnv1a(bytes) != record.checksum)
      throw checkpoint_error(rank, "load_checkpoint",
                             path.string() + " is corrupted: its checksum is not the manifest's");
    const auto runs = saved.segments_of(r);
    std::size_t block_elements = 0;
    for (const auto& run : runs) block_elements += run.count;
    if (bytes.size() % sizeof(float) != 0 || bytes.size() / sizeof(float) < kinds * block_elements)
      throw checkpoint_error(rank, "load_checkpoint",
                             path.string() + " does not hold the block the manifest describes");
    std::vector<float> floats(bytes.size() / sizeof(float));
    std::memcpy(floats.data(), bytes.data(), bytes.size());
    auto next = floats.begin();
    for (std::size_t v = 0; v < kinds; ++v)
      for (const auto& run : runs) {
        std::copy_n(next, run.count,
                    values[v].begin() + static_cast<std::ptrdiff_t>(tensor_begin[run.tensor] + run.first));
        next += static_cast<std::ptrdiff_t>(run.count);
      }
    if (r == 0) tensor_state.assign(next, floats.end());
  }
  std::size_t tensor_state_floats = 0;
  for (std::size_t t = 0; t < layout.tensor_count(); ++t) tensor_state_floats += update.tensor_state(t).size();
  if (tensor_state.size() != tensor_state_floats)
    throw mismatch("its per-tensor optimizer state has " + std::to_string(tensor_state.size()) +
                   " floats, the update's " + std::to_string(tensor_state_floats));
  access::restore(update, m.steps, values, tensor_begin, tensor_state);
} catch (...) {
  rethrow_within_call(comm.world_rank(), call_text("load_checkpoint", directory.string()));
}

}  // namespace shardwise::optim
