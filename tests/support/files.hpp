#pragma once
// Files for tests that write to the disk: a folder every rank names alike, and a file's bytes.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>

namespace shardwise::testing {

// An empty folder in the temporary directory, the same on every rank of `comm` (a collective) and
// unique to this run: its name carries `tag`, rank 0's process id and the rank count.
template <class Communicator>
[[nodiscard]] std::filesystem::path shared_folder(Communicator& comm, const std::string& tag) {
  std::int64_t id = comm.rank() == 0 ? static_cast<std::int64_t>(::getpid()) : 0;
  comm.broadcast(std::span<std::int64_t>(&id, 1), 0);
  const auto folder = std::filesystem::temp_directory_path() /
                      ("shardwise-" + tag + "-" + std::to_string(id) + "-" + std::to_string(comm.size()));
  if (comm.rank() == 0) std::filesystem::remove_all(folder);
  comm.barrier();
  return folder;
}

// The bytes of the file at `path` ("" when there is none).
[[nodiscard]] inline std::string file_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace shardwise::testing
