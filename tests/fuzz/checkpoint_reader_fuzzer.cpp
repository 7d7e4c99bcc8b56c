// A libFuzzer target for the checkpoint reader (built when the compiler is Clang, with AddressSanitizer
// and UndefinedBehaviorSanitizer). Each input edits a small valid checkpoint of either kind — its
// first byte picks the kind and whether the checksums are recomputed after the edits; then each edit
// is [file, operation, offset (2 bytes), length, bytes...]: overwrite, insert or cut bytes of
// `latest`, the manifest or the rank file. With the checksums recomputed (the rank file's size and
// CRC-32C in the manifest, the manifest's and `latest`'s own CRC-32C lines), coverage guidance reaches
// the parsers behind them. A load must succeed or throw a shardwise::error; any other exception, a
// crash or a sanitizer's report is a finding.
//
//   checkpoint_reader_fuzzer -max_total_time=600      (CTest fuzz.checkpoint_reader: 20,000 inputs)
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "shardwise/comm/threads.hpp"
#include "support/checkpoint_states.hpp"
#include "support/files.hpp"

namespace {

namespace fs = std::filesystem;
using namespace shardwise;

// A valid checkpoint of one kind, saved by one rank: its folder and its three files' bytes.
struct valid_checkpoint {
  fs::path folder;
  std::vector<fs::path> paths;  // latest, the manifest, the rank file
  std::vector<std::string> files;
};

template <template <class> class State>
valid_checkpoint save_valid(const fs::path& folder) {
  fs::remove_all(folder);
  threads::run(1, [&](auto& world) {
    State<std::remove_cvref_t<decltype(world)>> state(world);
    state.set(2, 0);
    state.save(folder);
  });
  valid_checkpoint c{folder, {folder / "latest", folder / "step-2" / "manifest", folder / "step-2" / "rank-0.bin"}, {}};
  for (const auto& path : c.paths) c.files.push_back(testing::file_text(path));
  return c;
}

// In memory (/dev/shm) where there is one: every input rewrites the files, which a disk makes the
// slowest part of a run.
struct checkpoints {
  fs::path root = (fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path()) /
                  ("shardwise-checkpoint-fuzzer-" + std::to_string(::getpid()));
  valid_checkpoint flat = save_valid<testing::flat_state>(root / "flat");
  valid_checkpoint model = save_valid<testing::model_state>(root / "model");
  checkpoints() = default;
  checkpoints(const checkpoints&) = delete;
  checkpoints& operator=(const checkpoints&) = delete;
  ~checkpoints() { fs::remove_all(root); }
};

// `text` without its checksum line, when it ends in one.
std::string body_of(const std::string& text) {
  constexpr std::size_t seal = 16;  // "crc32c " + 8 hex digits + newline
  if (text.size() >= seal && text.compare(text.size() - seal, 7, "crc32c ") == 0)
    return text.substr(0, text.size() - seal);
  return text;
}

// The manifest with the rank file's entry set to `file`'s size and CRC-32C, when the entry is there.
std::string relisted(std::string manifest, const std::string& file) {
  const std::size_t at = manifest.find("rank-0.bin ");
  if (at == std::string::npos) return manifest;
  const std::size_t end = manifest.find('\n', at);
  manifest.replace(
      at, end == std::string::npos ? std::string::npos : end - at,
      "rank-0.bin " + std::to_string(file.size()) + " " + optim::detail::hex32(crc32c(optim::detail::bytes_of(file))));
  return manifest;
}

template <template <class> class State>
void load_and_check(const fs::path& folder) {
  threads::run(1, [&](auto& world) {
    State<std::remove_cvref_t<decltype(world)>> state(world);
    try {
      state.load(folder);
    } catch (const shardwise::error&) {
      return;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "the reader threw something that is not a shardwise::error: %s\n", e.what());
      std::abort();
    }
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const checkpoints saved;
  if (size == 0) return 0;
  const bool model = (data[0] & 1U) != 0;
  const bool reseal = (data[0] & 2U) != 0;
  const valid_checkpoint& valid = model ? saved.model : saved.flat;
  std::vector<std::string> files = valid.files;
  if (reseal) {
    files[0] = body_of(files[0]);
    files[1] = body_of(files[1]);
  }
  for (std::size_t at = 1; at + 5 <= size;) {
    std::string& file = files[data[at] % files.size()];
    const unsigned operation = data[at + 1] % 3U;
    const std::size_t offset = (data[at + 2] | static_cast<std::size_t>(data[at + 3]) << 8U) % (file.size() + 1);
    const std::size_t length = data[at + 4];
    at += 5;
    if (operation == 2) {
      file.erase(offset, length);
      continue;
    }
    const std::string bytes(reinterpret_cast<const char*>(data + at), std::min(length, size - at));
    at += bytes.size();
    if (operation == 0) file.replace(offset, bytes.size(), bytes);
    else
      file.insert(offset, bytes);
  }
  if (reseal) {
    files[1] = optim::detail::sealed(relisted(files[1], files[2]));
    files[0] = optim::detail::sealed(files[0]);
  }
  for (std::size_t f = 0; f < files.size(); ++f)
    std::ofstream(valid.paths[f], std::ios::binary | std::ios::trunc) << files[f];
  if (model) load_and_check<testing::model_state>(valid.folder);
  else
    load_and_check<testing::flat_state>(valid.folder);
  return 0;
}
