#pragma once
// data::byte_corpus: a text corpus read as bytes (a vocabulary of 256), split into training and
// validation, and the batches of a language model drawn from it.
//
//   data::byte_corpus corpus("/usr/share/games/fortunes");       // a file, or every file of a folder
//   auto batch = corpus.training_batch(step, slot, slots, samples, context, seed);
//   model.forward(batch.tokens, batch.targets);                   // targets: tokens shifted by one
//
// A folder is read recursively in path order: regular files only, symbolic links and `.dat` files
// (the fortune program's indexes) skipped. The last validation_fraction of the bytes is held out.
//
// Batches are keyed, not streamed: sample s of slot `slot` at step `step` starts at an offset that is a
// hash of (seed, step, global sample) with global sample = slot · samples + s (core/counter_random.hpp).
// The slots are the data-parallel replicas times the micro-batches, so every replica reads its own
// samples, the global batch of a step is the same however it is split (data 2 x 2 micro-batches reads
// what data 4 reads), and a run resumed at step k reads what the uninterrupted run read there.
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "shardwise/core/counter_random.hpp"
#include "shardwise/core/error.hpp"

namespace shardwise::data {

// A corpus that cannot be read, or is too small for what is asked of it.
class data_error : public error {
  using error::error;
};

// `samples` windows of `context` tokens and, for each, the next token at each position.
struct token_batch {
  std::vector<std::int32_t> tokens;   // samples x context, row-major
  std::vector<std::int32_t> targets;  // the same windows, one byte later
};

class byte_corpus {
 public:
  // `rank` only names the caller in errors (-1: none).
  explicit byte_corpus(const std::filesystem::path& path, double validation_fraction = 0.1, int rank = -1)
      : path_(path), rank_(rank), bytes_(read(path, rank)) {
    if (!(validation_fraction > 0 && validation_fraction < 1))
      fail("the validation fraction " + std::to_string(validation_fraction) + " is not between 0 and 1");
    validation_begin_ =
        bytes_.size() - static_cast<std::size_t>(static_cast<double>(bytes_.size()) * validation_fraction);
  }

  [[nodiscard]] std::span<const std::uint8_t> training() const noexcept {
    return std::span<const std::uint8_t>(bytes_).first(validation_begin_);
  }
  [[nodiscard]] std::span<const std::uint8_t> validation() const noexcept {
    return std::span<const std::uint8_t>(bytes_).subspan(validation_begin_);
  }

  // Training samples of step `step` for slot `slot` of `slots` (see the top of this file).
  [[nodiscard]] token_batch training_batch(long step, long slot, long slots, long samples, long context,
                                           std::uint64_t seed) const {
    return batch(training(), "training", seed, step, slot, slots, samples, context);
  }

  // Validation batch `index`: the same windows for the same index in every run and on every mesh.
  [[nodiscard]] token_batch validation_batch(long index, long slot, long slots, long samples, long context) const {
    return batch(validation(), "validation", validation_seed, index, slot, slots, samples, context);
  }

 private:
  static constexpr std::uint64_t validation_seed = 0x5EED5EED;

  [[noreturn]] void fail(const std::string& what) const { fail(path_, rank_, what); }
  [[noreturn]] static void fail(const std::filesystem::path& path, int rank, const std::string& what) {
    throw data_error(rank, "data::byte_corpus", path.string() + ": " + what);
  }

  [[nodiscard]] token_batch batch(std::span<const std::uint8_t> split, const char* name, std::uint64_t seed, long key,
                                  long slot, long slots, long samples, long context) const {
    if (slot < 0 || slot >= slots || samples < 1 || context < 1)
      fail("slot " + std::to_string(slot) + " of " + std::to_string(slots) + ", " + std::to_string(samples) +
           " samples of " + std::to_string(context) + " tokens: not a batch");
    if (split.size() < static_cast<std::size_t>(context) + 1)
      fail("the " + std::string(name) + " split has " + std::to_string(split.size()) +
           " bytes, fewer than one sample of " + std::to_string(context) + " tokens and its target");
    const std::size_t starts = split.size() - static_cast<std::size_t>(context);  // offsets 0 .. starts-1
    token_batch b;
    b.tokens.reserve(static_cast<std::size_t>(samples * context));
    b.targets.reserve(b.tokens.capacity());
    for (long s = 0; s < samples; ++s) {
      const auto offset =
          static_cast<std::size_t>(uniform_at(seed, key, slot * samples + s) * static_cast<double>(starts));
      b.tokens.insert(b.tokens.end(), split.begin() + static_cast<std::ptrdiff_t>(offset),
                      split.begin() + static_cast<std::ptrdiff_t>(offset) + context);
      b.targets.insert(b.targets.end(), split.begin() + static_cast<std::ptrdiff_t>(offset) + 1,
                       split.begin() + static_cast<std::ptrdiff_t>(offset) + context + 1);
    }
    return b;
  }

  static std::vector<std::uint8_t> read(const std::filesystem::path& path, int rank) {
    namespace fs = std::filesystem;
    std::error_code error;
    const auto status = fs::symlink_status(path, error);
    if (error || !fs::exists(status)) fail(path, rank, "no such file or folder");
    std::vector<fs::path> files;
    try {
      if (fs::is_directory(fs::status(path))) {
        for (const auto& entry : fs::recursive_directory_iterator(path, fs::directory_options::skip_permission_denied))
          if (entry.is_regular_file() && !entry.is_symlink() && entry.path().extension() != ".dat")
            files.push_back(entry.path());
        std::ranges::sort(files);
        if (files.empty()) fail(path, rank, "the folder has no text files (symbolic links and .dat files are skipped)");
      } else if (!fs::exists(fs::status(path))) {
        fail(path, rank, "a symbolic link to " + fs::read_symlink(path).string() + ", which leads nowhere");
      } else {
        files.push_back(path);
      }
    } catch (const fs::filesystem_error& e) {  // a link that leads nowhere, a folder that cannot be listed
      fail(e.path1().empty() ? path : e.path1(), rank, e.code().message());
    }
    std::vector<std::uint8_t> bytes;
    for (const auto& file : files) {
      errno = 0;
      std::ifstream in(file, std::ios::binary);
      if (!in) fail(file, rank, "cannot be read" + (errno != 0 ? ": " + std::generic_category().message(errno) : ""));
      bytes.insert(bytes.end(), std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    if (bytes.empty()) fail(path, rank, "the corpus is empty");
    return bytes;
  }

  std::filesystem::path path_;
  int rank_;
  std::vector<std::uint8_t> bytes_;
  std::size_t validation_begin_ = 0;
};

// Bytes as text for a terminal: printable ASCII, newlines and tabs as they are, others as \xNN.
template <class Token>
[[nodiscard]] std::string printable(std::span<const Token> tokens) {
  std::string text;
  for (const Token token : tokens) {
    const auto byte = static_cast<unsigned>(token) & 0xFFu;
    if ((byte >= 0x20 && byte < 0x7F) || byte == '\n' || byte == '\t') {
      text += static_cast<char>(byte);
    } else {
      static constexpr char digits[] = "0123456789abcdef";
      text += "\\x";
      text += digits[byte >> 4];
      text += digits[byte & 0xF];
    }
  }
  return text;
}
template <class Token>
[[nodiscard]] std::string printable(const std::vector<Token>& tokens) {
  return printable(std::span<const Token>(tokens));
}

}  // namespace shardwise::data
