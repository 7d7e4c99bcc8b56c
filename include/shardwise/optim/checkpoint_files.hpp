#pragma once
// How a checkpoint reaches the disk and comes back, for both kinds (checkpoint.hpp: an update's flat
// buffers; model_checkpoint.hpp: a model's named tensors): one commit protocol, one checksum (CRC-32C,
// core/crc32c.hpp), one reader.
//
// A save of step N into `dir` (a collective; no rank touches anything but the new step's files until
// step 5 of the list, and then only rank 0):
//   1. rank 0 removes what a killed save left (`step-*.tmp/`, `latest.tmp`) and creates `step-N.tmp/`;
//   2. each rank with a file writes `step-N.tmp/rank-<r>.bin` and fsyncs it;
//   3. rank 0 writes `step-N.tmp/manifest`: the kind's header, every file's name, size and CRC-32C, the
//      kind's description, and last a line with the CRC-32C of all the bytes before it; fsyncs it and
//      the folder;
//   4. rank 0 renames `step-N.tmp/` to `step-N/` (exchanging the two in one step when an earlier save
//      of the same step is there, then removing that one) and fsyncs `dir`;
//   5. rank 0 writes `latest.tmp` (the folder's name, sealed by its CRC-32C as the manifest is),
//      fsyncs it, renames it to `latest` and fsyncs `dir`;
//   6. rank 0 retires the step folders beyond the newest `keep` (renamed to `step-M.tmp/`, then removed).
// Until the rename of step 5, `latest` names the previous checkpoint, which no step touches; from it
// on, the new one, complete. A folder called `step-M` is always complete; loads never read `*.tmp`.
//
// A load opens the folder `dir/latest` names (or a step folder given directly), checks the manifest's
// own CRC-32C, then each file's size and CRC-32C as it reads it: a missing, truncated or altered file
// is a checkpoint_error naming the file, what was expected and what was found. Every count and length
// read from a file is bounded by the bytes that remain in it, so no input makes a load allocate more
// than the files hold, read outside them or loop.
//
// Fault points, for tests only: a program that defines SHARDWISE_CHECKPOINT_FAULT_POINT(what) before
// including this header has it called before each step of a save that changes the disk (and half-way
// through each file's bytes), `what` describing the step ("rename /dir/step-3.tmp to /dir/step-3").
// tests/optim/checkpoint_kill_test.cpp kills saves there; anywhere else the macro is nothing.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <limits>
#include <optional>
#include <ranges>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "shardwise/comm/communicator.hpp"
#include "shardwise/core/crc32c.hpp"
#include "shardwise/core/error.hpp"

#ifndef SHARDWISE_CHECKPOINT_FAULT_POINT
#define SHARDWISE_CHECKPOINT_FAULT_POINT(what) ((void)0)
#endif

namespace shardwise::optim {

// A checkpoint that cannot be written, or read back as it was written.
class checkpoint_error : public error {
  using error::error;
};

namespace detail {

// The user's call a save or load serves, and this rank in the world: what every error names.
struct checkpoint_call {
  int rank = -1;
  std::string_view operation;

  [[nodiscard]] checkpoint_error error(const std::string& detail) const { return {rank, operation, detail}; }
};

[[nodiscard]] inline std::string step_folder_name(long step) { return "step-" + std::to_string(step); }
[[nodiscard]] inline std::string rank_file_name(int rank) { return "rank-" + std::to_string(rank) + ".bin"; }

// The decimal number of `digits` (digits only, no sign), or nothing.
template <class Integer>
[[nodiscard]] std::optional<Integer> decimal(std::string_view digits) {
  Integer value{};
  if (digits.empty() || digits.front() < '0' || digits.front() > '9') return std::nullopt;
  const auto [end, status] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (status != std::errc{} || end != digits.data() + digits.size()) return std::nullopt;
  return value;
}

// The step of a folder called step-<N> as saves name it; nothing for any other name (step-<N>.tmp,
// step-007).
[[nodiscard]] inline std::optional<long> step_of_folder(std::string_view name) {
  if (!name.starts_with("step-") || (name.size() > 6 && name[5] == '0')) return std::nullopt;
  return decimal<long>(name.substr(5));
}

// A CRC-32C as checkpoints write it: 8 lowercase hexadecimal digits.
[[nodiscard]] inline std::string hex32(std::uint32_t value) {
  char digits[9];
  std::snprintf(digits, sizeof digits, "%08x", value);
  return digits;
}
[[nodiscard]] inline std::optional<std::uint32_t> parse_hex32(std::string_view digits) {
  std::uint32_t value = 0;
  if (digits.size() != 8 || digits.find_first_not_of("0123456789abcdef") != std::string_view::npos) return std::nullopt;
  std::from_chars(digits.data(), digits.data() + digits.size(), value, 16);
  return value;
}

[[nodiscard]] inline std::span<const std::byte> bytes_of(std::string_view text) noexcept {
  return std::as_bytes(std::span<const char>(text.data(), text.size()));
}

// ---- writing

// Writes `bytes` into a new file at `path` and flushes it to the disk.
inline void write_durably(const std::filesystem::path& path, std::span<const std::byte> bytes,
                          const checkpoint_call& call) {
  const auto failed = [&](const char* what) {
    return call.error(std::string(what) + " " + path.string() + ": " + std::strerror(errno));
  };
  SHARDWISE_CHECKPOINT_FAULT_POINT("create " + path.string());
  const int file = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (file < 0) throw failed("cannot create");
  // The error is made before close(), which may change errno.
  const auto closed_after = [&](const char* what) {
    auto error = failed(what);
    ::close(file);
    return error;
  };
  const auto write_all = [&](std::span<const std::byte> part) {
    while (!part.empty()) {
      const ::ssize_t written = ::write(file, part.data(), part.size());
      if (written < 0 && errno == EINTR) continue;
      if (written < 0) throw closed_after("cannot write");
      part = part.subspan(static_cast<std::size_t>(written));
    }
  };
  write_all(bytes.first(bytes.size() / 2));
  SHARDWISE_CHECKPOINT_FAULT_POINT("write the second half of " + path.string());
  write_all(bytes.subspan(bytes.size() / 2));
  if (::fsync(file) != 0) throw closed_after("cannot flush");
  if (::close(file) != 0) throw failed("cannot close");
}

// Makes the names a folder holds (created, renamed, removed) durable.
inline void sync_folder(const std::filesystem::path& folder, const checkpoint_call& call) {
  const int handle = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (handle < 0) throw call.error("cannot open the folder " + folder.string() + ": " + std::strerror(errno));
  // EINVAL: a file system that keeps no folder state of its own to flush.
  const bool synced = ::fsync(handle) == 0 || errno == EINVAL;
  const int error_number = errno;
  ::close(handle);
  if (!synced) throw call.error("cannot flush the folder " + folder.string() + ": " + std::strerror(error_number));
}

inline void rename_path(const std::filesystem::path& from, const std::filesystem::path& to,
                        const checkpoint_call& call) {
  SHARDWISE_CHECKPOINT_FAULT_POINT("rename " + from.string() + " to " + to.string());
  if (std::rename(from.c_str(), to.c_str()) != 0)
    throw call.error("cannot rename " + from.string() + " to " + to.string() + ": " + std::strerror(errno));
}

// Swaps two folders in one atomic step (Linux's renameat2), so that a name never stops existing.
inline void exchange_paths(const std::filesystem::path& first, const std::filesystem::path& second,
                           const checkpoint_call& call) {
  SHARDWISE_CHECKPOINT_FAULT_POINT("exchange " + first.string() + " and " + second.string());
#ifdef RENAME_EXCHANGE
  if (::renameat2(AT_FDCWD, first.c_str(), AT_FDCWD, second.c_str(), RENAME_EXCHANGE) == 0) return;
  throw call.error("cannot exchange " + first.string() + " and " + second.string() + ": " + std::strerror(errno));
#else
  throw call.error(second.string() +
                   " exists: replacing a saved step needs an atomic exchange of folders, "
                   "which this system lacks; save into another folder");
#endif
}

inline void remove_path(const std::filesystem::path& path, const checkpoint_call& call) {
  SHARDWISE_CHECKPOINT_FAULT_POINT("remove " + path.string());
  std::error_code error;
  std::filesystem::remove_all(path, error);
  if (error) throw call.error("cannot remove " + path.string() + ": " + error.message());
}

// `text` (ending in a newline) and a last line holding the CRC-32C of all of it.
[[nodiscard]] inline std::string sealed(const std::string& text) {
  const std::uint32_t checksum = crc32c(bytes_of(text));
  return text + "crc32c " + hex32(checksum) + "\n";
}

// Replaces `path` by a sealed text file in one atomic step.
inline void replace_durably(const std::filesystem::path& path, const std::string& text, const checkpoint_call& call) {
  std::filesystem::path temporary = path;
  temporary += ".tmp";
  write_durably(temporary, bytes_of(sealed(text)), call);
  rename_path(temporary, path, call);
  sync_folder(path.parent_path(), call);
}

// Whether a failure on any rank stops the save: every rank learns which ranks failed and all throw,
// a failed rank its own error, the others one naming the first rank that failed and `what` it did.
template <communicator C>
void throw_if_any_failed(C& comm, const std::exception_ptr& failure, const checkpoint_call& call,
                         std::string_view what) {
  const std::int32_t own = failure ? 1 : 0;
  std::vector<std::int32_t> failed(static_cast<std::size_t>(comm.size()));
  comm.all_gather(std::span<const std::int32_t>(&own, 1), std::span<std::int32_t>(failed));
  if (failure) std::rethrow_exception(failure);
  for (int r = 0; r < comm.size(); ++r)
    if (failed[static_cast<std::size_t>(r)] != 0)
      throw call.error("rank " + std::to_string(r) + " could not " + std::string(what));
}

// Every rank of `comm` loads together: `load` runs on each and returns the step count it restored. A
// failure on any rank throws on every rank (throw_if_any_failed), and ranks that restored different
// steps (given different paths) throw too, so that no replica trains on from a checkpoint the others
// did not load. The update may be half restored then; it must be loaded again before use.
template <communicator C, class Load>
long load_together(C& comm, const std::filesystem::path& path, const checkpoint_call& call, Load&& load) {
  long steps = -1;
  std::exception_ptr failure;
  try {
    steps = load();
  } catch (...) {
    failure = std::current_exception();
  }
  throw_if_any_failed(comm, failure, call, "load " + path.string());
  std::array<std::int64_t, 2> range{steps, -static_cast<std::int64_t>(steps)};
  comm.all_reduce(std::span<std::int64_t>(range), op::max);
  if (range[0] != -range[1])
    throw call.error("the ranks restored different steps, " + std::to_string(-range[1]) + " to " +
                     std::to_string(range[0]) + ": every rank must load the same checkpoint");
  return steps;
}

// Runs `step`, returning its failure as a checkpoint_error (a file system's own error wrapped in one).
template <class Step>
[[nodiscard]] std::exception_ptr attempt(const checkpoint_call& call, Step&& step) {
  try {
    step();
  } catch (const checkpoint_error&) {
    return std::current_exception();
  } catch (const std::filesystem::filesystem_error& e) {
    return std::make_exception_ptr(call.error(e.path1().string() + ": " + e.code().message()));
  } catch (const std::exception&) {
    return std::make_exception_ptr(call.error(reason_of(std::current_exception())));
  }
  return nullptr;
}

// Step 1 of a save (rank 0): removes what killed saves left and creates the new step's folder.
inline void prepare_save(const std::filesystem::path& directory, const std::filesystem::path& folder,
                         const checkpoint_call& call) {
  namespace fs = std::filesystem;
  fs::create_directories(directory);
  for (const auto& entry : fs::directory_iterator(directory)) {
    const std::string name = entry.path().filename().string();
    if (name == "latest.tmp" || (name.ends_with(".tmp") && step_of_folder(name.substr(0, name.size() - 4))))
      remove_path(entry.path(), call);
  }
  SHARDWISE_CHECKPOINT_FAULT_POINT("create " + folder.string());
  fs::create_directory(folder);
}

// Steps 3 to 6 (rank 0), once every rank's file is in `folder`.
inline void commit_save(const std::filesystem::path& directory, const std::filesystem::path& folder, long step,
                        const std::string& manifest, int keep, const checkpoint_call& call) {
  namespace fs = std::filesystem;
  write_durably(folder / "manifest", bytes_of(sealed(manifest)), call);
  sync_folder(folder, call);
  const fs::path final_folder = directory / step_folder_name(step);
  if (fs::exists(final_folder)) {  // an earlier save of this step, replaced whole
    exchange_paths(folder, final_folder, call);
    sync_folder(directory, call);
    remove_path(folder, call);
  } else {
    rename_path(folder, final_folder, call);
    sync_folder(directory, call);
  }
  replace_durably(directory / "latest", step_folder_name(step) + "\n", call);

  // The newest `keep` stay, the one just saved among them whatever its number.
  std::vector<long> others;
  for (const auto& entry : fs::directory_iterator(directory))
    if (const auto saved = step_of_folder(entry.path().filename().string()); saved && *saved != step)
      others.push_back(*saved);
  std::ranges::sort(others, std::greater<>());
  for (std::size_t i = static_cast<std::size_t>(keep - 1); i < others.size(); ++i) {
    const fs::path retired = directory / step_folder_name(others[i]);
    fs::path doomed = retired;
    doomed += ".tmp";
    rename_path(retired, doomed, call);
    remove_path(doomed, call);
  }
}

// Saves a checkpoint of step `step` under `directory` by the protocol above: a collective over `comm`,
// whose ranks pass the same directory, step, header and keep. `file` is this rank's file (nothing:
// it writes none); `description` is the kind's part of the manifest, which rank 0 writes. Returns once
// `latest` names the new checkpoint; a failure on any rank throws checkpoint_error on every rank and
// leaves the previous checkpoint as it was.
template <communicator C>
void save_checkpoint_files(C& comm, const std::filesystem::path& directory, long step, std::string_view header,
                           const std::string& description, std::optional<std::span<const std::byte>> file, int keep,
                           const checkpoint_call& call) {
  if (keep < 1)
    throw argument_error(call.rank, call.operation,
                         "keep = " + std::to_string(keep) + ": a save keeps at least the checkpoint it writes");
  std::filesystem::path folder = directory / step_folder_name(step);
  folder += ".tmp";
  const bool first = comm.rank() == 0;

  throw_if_any_failed(comm, first ? attempt(call, [&] { prepare_save(directory, folder, call); }) : nullptr, call,
                      "create " + folder.string());

  const auto written = attempt(call, [&] {
    if (file) write_durably(folder / rank_file_name(comm.rank()), *file, call);
  });
  const std::uint64_t own[3] = {file ? 1U : 0U, file ? file->size() : 0U, file ? crc32c(*file) : 0U};
  std::vector<std::uint64_t> files(3 * static_cast<std::size_t>(comm.size()));
  comm.all_gather(std::span<const std::uint64_t>(own), std::span<std::uint64_t>(files));
  throw_if_any_failed(comm, written, call, "write its file into " + folder.string());

  std::exception_ptr committed;
  if (first) {
    std::string manifest = std::string(header) + "\n";
    std::string list;
    int count = 0;
    for (int r = 0; r < comm.size(); ++r) {
      const auto* record = &files[3 * static_cast<std::size_t>(r)];
      if (record[0] == 0) continue;
      ++count;
      list += rank_file_name(r) + " " + std::to_string(record[1]) + " " + hex32(static_cast<std::uint32_t>(record[2])) +
              "\n";
    }
    manifest += "files " + std::to_string(count) + "\n" + list + description;
    committed = attempt(call, [&] { commit_save(directory, folder, step, manifest, keep, call); });
  }
  throw_if_any_failed(comm, committed, call, "commit the checkpoint in " + directory.string());
}

// ---- reading

// The bytes of the file at `path`; with `expected`, its size must be that (checked before reading),
// else an error naming the file as `name` says.
[[nodiscard]] inline std::vector<std::byte> read_file(const std::filesystem::path& path, const checkpoint_call& call,
                                                      std::optional<std::uint64_t> expected = std::nullopt,
                                                      const std::string& name = {}) {
  const int file = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (file < 0) throw call.error("cannot open " + path.string() + ": " + std::strerror(errno));
  struct ::stat status{};
  if (::fstat(file, &status) != 0 || !S_ISREG(status.st_mode)) {
    ::close(file);
    throw call.error(path.string() + " is not a readable file");
  }
  const auto size = static_cast<std::uint64_t>(status.st_size);
  if (expected && size != *expected) {
    ::close(file);
    throw call.error((name.empty() ? path.string() : name) + " is damaged: " + std::to_string(size) +
                     " bytes, the manifest says " + std::to_string(*expected) + " (truncated or overlong)");
  }
  std::vector<std::byte> bytes(static_cast<std::size_t>(size));
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ::ssize_t got = ::read(file, bytes.data() + done, bytes.size() - done);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      const std::string reason = got < 0 ? std::strerror(errno) : "it shrank while being read";
      ::close(file);
      throw call.error("cannot read " + path.string() + ": " + reason);
    }
    done += static_cast<std::size_t>(got);
  }
  ::close(file);
  return bytes;
}

// The text of a sealed file before its checksum line, once the checksum agrees with it.
[[nodiscard]] inline std::string unsealed(std::span<const std::byte> bytes, const std::filesystem::path& path,
                                          const checkpoint_call& call) {
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  constexpr std::string_view word = "crc32c ";
  constexpr std::size_t seal = word.size() + 8 + 1;  // the word, 8 hex digits, a newline
  const std::size_t body = text.size() < seal ? 0 : text.size() - seal;
  const std::string_view line = text.substr(body);
  const auto expected = line.size() == seal ? parse_hex32(line.substr(word.size(), 8)) : std::nullopt;
  if (!expected || !line.starts_with(word) || line.back() != '\n' || (body > 0 && text[body - 1] != '\n'))
    throw call.error(path.string() + " is damaged: it does not end in its checksum line (truncated?)");
  const std::uint32_t found = crc32c(bytes.first(body));
  if (found != *expected)
    throw call.error(path.string() + " is damaged: CRC-32C " + hex32(*expected) + " expected (its last line), " +
                     hex32(found) + " found");
  return std::string(text.substr(0, body));
}

// At most 40 characters of a word read from a file, control characters shown as '?'.
[[nodiscard]] inline std::string printable(std::string_view word) {
  std::string shown(word.substr(0, 40));
  for (char& c : shown)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  return word.size() > 40 ? shown + "..." : shown;
}

// `text` as one word of a manifest (a name, a key): not empty, no spaces or control characters.
[[nodiscard]] inline std::string_view manifest_word(std::string_view text, std::string_view what,
                                                    const checkpoint_call& call) {
  const bool plain = !text.empty() && std::ranges::none_of(text, [](char c) {
    return static_cast<unsigned char>(c) <= 0x20 || c == 0x7f;
  });
  if (!plain)
    throw argument_error(call.rank, call.operation,
                         std::string(what) + " \"" + printable(text) + "\" is not one word (no spaces or line breaks)");
  return text;
}

// Reads a manifest's text: words separated by one space, lines ending in a newline. Every error names
// the file and the line; a count is refused when the text left could not hold that many entries.
class text_reader {
 public:
  text_reader(std::string text, std::filesystem::path path, checkpoint_call call)
      : text_(std::move(text)), path_(std::move(path)), call_(call) {}

  // The next word, up to a space (consumed) or the end of the line (not consumed).
  [[nodiscard]] std::string_view word() {
    const std::size_t end = std::min(text_.find_first_of(" \n", at_), text_.size());
    const std::string_view found = std::string_view(text_).substr(at_, end - at_);
    at_ = end < text_.size() && text_[end] == ' ' ? end + 1 : end;
    return found;
  }
  void expect(std::string_view expected) {
    const std::string_view found = word();
    if (found != expected)
      throw malformed("\"" + std::string(expected) + "\" expected, \"" + printable(found) + "\" found");
  }
  template <class Integer>
  [[nodiscard]] Integer number(std::string_view what, Integer low = 0,
                               Integer high = std::numeric_limits<Integer>::max()) {
    const std::string_view digits = word();
    const auto value = decimal<Integer>(digits);
    if (!value || *value < low || *value > high)
      throw malformed(std::string(what) + " \"" + printable(digits) + "\" is not a number from " + std::to_string(low) +
                      " to " + std::to_string(high));
    return *value;
  }
  // A count of entries that each take at least `entry_bytes` of the text.
  [[nodiscard]] std::size_t count(std::string_view what, std::size_t entry_bytes) {
    return number<std::size_t>(what, 0, (text_.size() - at_) / entry_bytes);
  }
  // The rest of the line, spaces included; the newline is consumed.
  [[nodiscard]] std::string rest_of_line() {
    const std::size_t end = std::min(text_.find('\n', at_), text_.size());
    std::string rest = text_.substr(at_, end - at_);
    at_ = end;
    end_line();
    return rest;
  }
  void end_line() {
    if (at_ >= text_.size() || text_[at_] != '\n') throw malformed("the line goes on where it should end");
    ++at_;
    ++line_;
  }
  void expect_end() {
    if (at_ != text_.size()) throw malformed("text follows the last entry");
  }

  [[nodiscard]] checkpoint_error malformed(const std::string& what) const {
    return call_.error(path_.string() + " is malformed at line " + std::to_string(line_) + ": " + what);
  }

 private:
  std::string text_;
  std::filesystem::path path_;
  checkpoint_call call_;
  std::size_t at_ = 0;
  int line_ = 1;
};

// A manifest's line of the optimizer's state variables, "state K name...", as written and as read.
[[nodiscard]] inline std::string state_names_line(std::span<const std::string_view> names) {
  std::string line = "state " + std::to_string(names.size());
  for (const auto name : names) line.append(" ").append(name);
  return line + "\n";
}
// "{a, b}": optimizer state names as an error quotes them; "none" for an optimizer that keeps none.
template <class Names>
[[nodiscard]] std::string names_text(const Names& names) {
  if (std::ranges::empty(names)) return "none";
  std::string text = "{";
  for (std::string_view separator; const auto& name : names) {
    text.append(separator).append(name);
    separator = ", ";
  }
  return text + "}";
}

[[nodiscard]] inline std::vector<std::string> read_state_names(text_reader& in) {
  in.expect("state");
  std::vector<std::string> names(in.count("the state count", 2));
  for (auto& name : names) name = in.word();
  in.end_line();
  return names;
}

// Reads a binary file's values in order; every length is checked against the bytes that remain.
class byte_reader {
 public:
  byte_reader(std::span<const std::byte> bytes, std::string name, checkpoint_call call)
      : bytes_(bytes), name_(std::move(name)), call_(call) {}

  [[nodiscard]] std::span<const std::byte> take(std::uint64_t count) {
    if (count > bytes_.size() - at_)
      throw call_.error(name_ + " ends inside an entry: " + std::to_string(count) + " bytes wanted at byte " +
                        std::to_string(at_) + " of " + std::to_string(bytes_.size()));
    const auto part = bytes_.subspan(at_, static_cast<std::size_t>(count));
    at_ += static_cast<std::size_t>(count);
    return part;
  }
  template <class Value>
  [[nodiscard]] Value value() {
    Value v;
    std::memcpy(&v, take(sizeof v).data(), sizeof v);
    return v;
  }
  [[nodiscard]] bool done() const noexcept { return at_ == bytes_.size(); }

 private:
  std::span<const std::byte> bytes_;
  std::string name_;
  checkpoint_call call_;
  std::size_t at_ = 0;
};

// One file a manifest lists.
struct listed_file {
  int rank = 0;  // the rank that wrote it: rank-<rank>.bin
  std::uint64_t bytes = 0;
  std::uint32_t crc = 0;
};

// A saved checkpoint, opened: the folder, its manifest checked and its file list read; the kind's
// description is read next, from manifest().
class checkpoint_folder {
 public:
  // `path`: a directory with `latest`, or a step folder; `header`: the kind's first manifest line.
  checkpoint_folder(const std::filesystem::path& path, std::string_view header, const checkpoint_call& call)
      : folder_(resolve(path, call)),
        call_(call),
        manifest_(unsealed(read_file(folder_ / "manifest", call), folder_ / "manifest", call), folder_ / "manifest",
                  call) {
    const std::string first = manifest_.rest_of_line();
    if (first != header)
      throw manifest_.malformed("not a checkpoint of this kind: \"" + std::string(header) + "\" expected");
    manifest_.expect("files");
    const std::size_t count = manifest_.count("the file count", 16);  // "rank-0.bin 0 00000000\n" at least
    manifest_.end_line();
    for (std::size_t f = 0; f < count; ++f) {
      const std::string_view name = manifest_.word();
      const auto rank = name.starts_with("rank-") && name.ends_with(".bin")
                            ? decimal<int>(name.substr(5, name.size() - 9))
                            : std::nullopt;
      if (!rank || (!files_.empty() && *rank <= files_.back().rank))
        throw manifest_.malformed("file " + std::to_string(f) + " is not rank-<r>.bin in increasing r");
      const auto bytes = manifest_.number<std::uint64_t>("a file size");
      const auto value = parse_hex32(manifest_.word());
      if (!value) throw manifest_.malformed("a file's CRC-32C is not 8 hexadecimal digits");
      manifest_.end_line();
      files_.push_back({*rank, bytes, *value});
    }
  }

  [[nodiscard]] const std::filesystem::path& path() const noexcept { return folder_; }
  [[nodiscard]] std::span<const listed_file> files() const noexcept { return files_; }
  [[nodiscard]] text_reader& manifest() noexcept { return manifest_; }
  [[nodiscard]] std::string file_path(const listed_file& file) const {
    return (folder_ / rank_file_name(file.rank)).string();
  }

  // A listed file's bytes, once its size and CRC-32C are the manifest's.
  [[nodiscard]] std::vector<std::byte> read(const listed_file& file) const {
    const auto path = folder_ / rank_file_name(file.rank);
    const std::string name = path.string() + " (written by rank " + std::to_string(file.rank) + ")";
    auto bytes = read_file(path, call_, file.bytes, name);
    const std::uint32_t found = crc32c(bytes);
    if (found != file.crc)
      throw call_.error(name + " is damaged: CRC-32C " + hex32(file.crc) + " expected (the manifest's), " +
                        hex32(found) + " found");
    return bytes;
  }

 private:
  // The step folder `path/latest` names, or `path` itself when it holds a manifest: never a *.tmp
  // folder, which a save may have left half written (or, retiring it, half removed).
  static std::filesystem::path resolve(const std::filesystem::path& path, const checkpoint_call& call) {
    namespace fs = std::filesystem;
    std::error_code ignored;
    if (!fs::is_directory(path, ignored))
      throw call.error("no checkpoint at " + path.string() + ": there is no such folder");
    if ((path.has_filename() ? path : path.parent_path()).filename().string().ends_with(".tmp"))
      throw call.error(path.string() +
                       " is a save that never finished, or a step being retired: load the folder "
                       "that holds it, whose latest names its newest finished step");
    if (fs::exists(path / "latest", ignored)) {
      const std::string name = unsealed(read_file(path / "latest", call), path / "latest", call);
      const bool step = name.ends_with('\n') && step_of_folder(std::string_view(name).substr(0, name.size() - 1));
      if (!step) throw call.error((path / "latest").string() + " is malformed: it does not name a step-<N> folder");
      fs::path folder = path / name.substr(0, name.size() - 1);
      if (!fs::is_directory(folder, ignored))
        throw call.error((path / "latest").string() + " names " + folder.string() + ", which is missing");
      return folder;
    }
    if (fs::exists(path / "manifest", ignored)) return path;
    throw call.error("no checkpoint at " + path.string() + ": it holds neither latest nor a manifest" +
                     step_folders_in(path));
  }

  // "; its step folders step-3, step-5 can be loaded by name", or nothing when it has none.
  static std::string step_folders_in(const std::filesystem::path& path) {
    std::vector<std::pair<long, std::string>> steps;
    std::error_code ignored;
    for (const auto& entry : std::filesystem::directory_iterator(path, ignored)) {
      const std::string name = entry.path().filename().string();
      if (const auto step = step_of_folder(name); step && entry.is_directory(ignored)) steps.emplace_back(*step, name);
    }
    if (steps.empty()) return "";
    std::ranges::sort(steps);
    std::string text = "; its step folders ";
    for (std::size_t s = 0; s < steps.size(); ++s) text += (s == 0 ? "" : ", ") + steps[s].second;
    return text + " can be loaded by name";
  }

  std::filesystem::path folder_;
  checkpoint_call call_;
  text_reader manifest_;
  std::vector<listed_file> files_;
};

}  // namespace detail
}  // namespace shardwise::optim
