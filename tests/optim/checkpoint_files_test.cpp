// The commit protocol and the reader both checkpoint kinds share (optim/checkpoint_files.hpp):
// CRC-32C gives its published check values; a save keeps the previous checkpoint, ignores what a
// killed save left and then removes it, keeps the newest K and replaces a step saved again whole; an
// edited manifest is refused naming the file and both checksums; and the reader's fuzz harness: every
// truncation of every file, byte flips at every byte of the text files and of the binary files' first
// 64 bytes plus 64 pseudo-random positions, each also with its checksums recomputed so that the
// parsers behind them see it — every one refused with a shardwise::error (or, with recomputed
// checksums, loaded), never a crash, a hang or another exception. The counts are printed.
#include "shardwise/optim/checkpoint_files.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "shardwise/core/counter_random.hpp"
#include "shardwise/core/crc32c.hpp"
#include "support/backends.hpp"
#include "support/checkpoint_states.hpp"
#include "support/files.hpp"

namespace {

using namespace shardwise;
using namespace shardwise::testing;
namespace fs = std::filesystem;

template <class Backend>
class checkpoint_files : public ::testing::Test {};
TYPED_TEST_SUITE(checkpoint_files, backends);

using optim::detail::bytes_of;

TEST(crc32c, gives_the_published_check_values) {
  // "123456789" (the CRC catalogue's check value) and RFC 3720's vectors.
  EXPECT_EQ(crc32c(bytes_of("123456789")), 0xE3069283U);
  std::string zeros(32, '\0'), ones(32, '\xff'), ascending(32, '\0');
  for (int i = 0; i < 32; ++i) ascending[static_cast<std::size_t>(i)] = static_cast<char>(i);
  EXPECT_EQ(crc32c(bytes_of(zeros)), 0x8A9136AAU);
  EXPECT_EQ(crc32c(bytes_of(ones)), 0x62A8AB43U);
  EXPECT_EQ(crc32c(bytes_of(ascending)), 0x46DD794EU);
  // In pieces of every split, the same as at once.
  const std::string text = "checkpoints that never lose data";
  for (std::size_t split = 0; split <= text.size(); ++split)
    EXPECT_EQ(crc32c(bytes_of(text.substr(split)), crc32c(bytes_of(text.substr(0, split)))), crc32c(bytes_of(text)));
}

// Overwrites a file in place, then cuts it to its new length: ext4 flushes a file truncated to nothing
// and rewritten when it is closed, which would make the thousands of cases below wait on the disk.
void write_text(const fs::path& path, const std::string& text) {
  if (!fs::exists(path)) std::ofstream{path};
  std::fstream(path, std::ios::binary | std::ios::in | std::ios::out) << text;
  fs::resize_file(path, text.size());
}

// What `folder` holds, listed by every rank before any goes on to change it.
template <class C>
[[nodiscard]] std::vector<std::string> names_in(C& comm, const fs::path& folder) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(folder)) names.push_back(entry.path().filename().string());
  std::ranges::sort(names);
  comm.barrier();
  return names;
}

template <class C, class F>
void for_each_kind(C& comm, F&& f) {
  {
    flat_state<C> state(comm);
    SCOPED_TRACE("flat checkpoint");
    f(state);
  }
  {
    model_state<C> state(comm);
    SCOPED_TRACE("model checkpoint");
    f(state);
  }
}

TYPED_TEST(checkpoint_files, saves_keep_the_previous_ignore_then_clean_leftovers_and_replace_a_step_whole) {
  TypeParam::run(
      [](communicator auto& comm) {
        for_each_kind(comm, [&](auto& state) {
          const fs::path folder = shared_folder(comm, std::string("checkpoint-protocol-") + state.kind);
          state.set(1, 0);
          state.save(folder);
          state.set(2, 0);
          state.save(folder);
          // What a killed save leaves, and a file of the user's.
          if (comm.rank() == 0) {
            fs::create_directories(folder / "step-7.tmp");
            write_text(folder / "step-7.tmp" / "manifest", "half a manifest");
            write_text(folder / "latest.tmp", "step-7\n");
            write_text(folder / "notes.txt", "mine");
          }
          comm.barrier();
          state.set(0, 0);
          state.load(folder);
          EXPECT_EQ(state.differences(2, 0), "") << "latest, beside a killed save's leftovers";
          state.load(folder / "step-1");
          EXPECT_EQ(state.differences(1, 0), "") << "an earlier step folder, named directly";
          // Named directly, a killed save's folder, a folder that is not there, and a folder whose
          // latest is gone are refused, saying what they are.
          const auto refused = [&](const fs::path& path, const std::string& words) {
            try {
              state.load(path);
              ADD_FAILURE() << path << " loaded";
            } catch (const optim::checkpoint_error& e) {
              EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
            }
          };
          refused(folder / "step-7.tmp", (folder / "step-7.tmp").string() + " is a save that never finished");
          refused(folder / "nowhere",
                  "no checkpoint at " + (folder / "nowhere").string() + ": there is no such folder");
          // Loads are collective: ranks given different steps all refuse them.
          if (comm.size() > 1)
            refused(comm.rank() == 1 ? folder / "step-1" : folder,
                    "the ranks restored different steps, 1 to 2: every rank must load the same checkpoint");
          comm.barrier();
          if (comm.rank() == 0) fs::rename(folder / "latest", folder / "latest.kept");
          comm.barrier();
          refused(folder,
                  "it holds neither latest nor a manifest; its step folders step-1, step-2 can be loaded by name");
          comm.barrier();
          if (comm.rank() == 0) fs::rename(folder / "latest.kept", folder / "latest");
          comm.barrier();

          state.set(3, 0);
          state.save(folder);  // keep 2: step-1 goes, and so do the leftovers; notes.txt stays
          EXPECT_EQ(names_in(comm, folder), (std::vector<std::string>{"latest", "notes.txt", "step-2", "step-3"}));
          state.set(3, 1);
          state.save(folder);  // the same step again: replaced whole
          EXPECT_EQ(names_in(comm, folder), (std::vector<std::string>{"latest", "notes.txt", "step-2", "step-3"}));
          state.set(0, 0);
          state.load(folder);
          EXPECT_EQ(state.differences(3, 1), "") << "the step saved again";
          state.load(folder / "step-2");
          EXPECT_EQ(state.differences(2, 0), "");

          state.set(4, 0);
          state.save(folder, 1);
          EXPECT_EQ(names_in(comm, folder), (std::vector<std::string>{"latest", "notes.txt", "step-4"}));
          EXPECT_THROW(state.save(folder, 0), argument_error);
          comm.barrier();
          if (comm.rank() == 0) fs::remove_all(folder);
        });
      },
      {1, 3, 4});
}

TYPED_TEST(checkpoint_files, an_edited_manifest_is_refused_naming_the_file_and_both_checksums) {
  TypeParam::run(
      [](communicator auto& comm) {
        for_each_kind(comm, [&](auto& state) {
          const fs::path folder = shared_folder(comm, std::string("checkpoint-edited-") + state.kind);
          state.set(2, 0);
          state.save(folder);
          const fs::path manifest = folder / "step-2" / "manifest";
          if (comm.rank() == 0) {
            std::string text = file_text(manifest);
            text.replace(text.find("steps 2"), 7, "steps 3");
            write_text(manifest, text);
          }
          comm.barrier();
          try {
            state.load(folder);
            ADD_FAILURE() << "a manifest whose steps field was edited loaded";
          } catch (const optim::checkpoint_error& e) {
            const std::string message = e.what();
            EXPECT_NE(message.find("[rank " + std::to_string(comm.world_rank()) + "]"), std::string::npos) << message;
            EXPECT_NE(message.find(manifest.string() + " is damaged: CRC-32C "), std::string::npos) << message;
            EXPECT_NE(message.find(" expected (its last line), "), std::string::npos) << message;
            EXPECT_NE(message.find(" found"), std::string::npos) << message;
          }
          comm.barrier();
          if (comm.rank() == 0) fs::remove_all(folder);
        });
      },
      {1, 3});
}

// ---- the fuzz harness

struct fuzz_counts {
  long damaged = 0;  // copies with a truncated or flipped file, checksums as saved
  long damaged_refused = 0;
  long resealed = 0;          // the same damages with the checksums recomputed over them
  long resealed_refused = 0;  // the others loaded, which is allowed: the damage is then a valid checkpoint
};

// One damaged copy of the checkpoint: the files to overwrite, and whether their checksums agree.
struct damage {
  std::vector<std::pair<fs::path, std::string>> files;
  bool resealed = false;
};

// The checkpoint's files (latest, the manifest, each rank's file) and the damages fed for each.
std::vector<damage> damages_of(const fs::path& folder, long& text_bytes, long& binary_bytes) {
  const fs::path manifest = folder / "step-2" / "manifest";
  const std::string manifest_text = file_text(manifest);
  const std::string manifest_body = manifest_text.substr(0, manifest_text.size() - 16);  // the seal: 16 bytes
  std::vector<damage> all;
  const auto deterministic = [](std::uint64_t a, std::uint64_t b) { return splitmix64(splitmix64(a) ^ b); };

  // Truncations at every length and flips at `positions` of `text`; each written as is, and through
  // `reseal` (which gives the files of a copy whose checksums agree with the damaged text).
  const auto feed = [&](const fs::path& path, const std::string& text, const std::vector<std::size_t>& positions,
                        auto&& reseal) {
    std::vector<std::string> damaged;
    for (std::size_t length = 0; length < text.size(); ++length) damaged.push_back(text.substr(0, length));
    for (const std::size_t at : positions) {
      std::string flipped = text;
      flipped[at] = static_cast<char>(flipped[at] ^ static_cast<char>(1 + deterministic(at, text.size()) % 255));
      damaged.push_back(flipped);
    }
    for (const auto& d : damaged) {
      all.push_back({{{path, d}}, false});
      all.push_back({reseal(d), true});
    }
  };
  const auto every_byte = [](std::size_t size) {
    std::vector<std::size_t> positions(size);
    for (std::size_t i = 0; i < size; ++i) positions[i] = i;
    return positions;
  };
  const auto seal_text = [](std::string body) { return optim::detail::sealed(std::move(body)); };

  // latest and the manifest: text, sealed by their last line; resealed after damaging the body.
  const std::string latest_body = "step-2\n";
  feed(folder / "latest", seal_text(latest_body), every_byte(latest_body.size() + 16), [&](const std::string& d) {
    const std::string body = d.substr(0, std::min(d.size(), latest_body.size()));
    return std::vector<std::pair<fs::path, std::string>>{{folder / "latest", seal_text(body)}};
  });
  text_bytes = static_cast<long>(latest_body.size() + 16 + manifest_text.size());
  feed(manifest, manifest_text, every_byte(manifest_text.size()), [&](const std::string& d) {
    const std::string body = d.substr(0, std::min(d.size(), manifest_body.size()));
    return std::vector<std::pair<fs::path, std::string>>{{manifest, seal_text(body)}};
  });

  // Each rank's file: binary; resealed by giving the manifest its new size and CRC-32C.
  binary_bytes = 0;
  std::vector<fs::path> rank_files;  // in one order on every rank: each feeds the same damages in turn
  for (const auto& entry : fs::directory_iterator(folder / "step-2"))
    if (entry.path().filename().string().starts_with("rank-")) rank_files.push_back(entry.path());
  std::ranges::sort(rank_files);
  for (const fs::path& path : rank_files) {
    const std::string name = path.filename().string();
    const std::string original = file_text(path);
    binary_bytes += static_cast<long>(original.size());
    std::vector<std::size_t> positions;
    for (std::size_t i = 0; i < std::min<std::size_t>(64, original.size()); ++i) positions.push_back(i);
    for (std::uint64_t i = 0; i < 64 && !original.empty(); ++i)
      positions.push_back(static_cast<std::size_t>(deterministic(i, original.size() + 1) % original.size()));
    const std::string listed =
        name + " " + std::to_string(original.size()) + " " + optim::detail::hex32(crc32c(bytes_of(original))) + "\n";
    feed(path, original, positions, [&](const std::string& d) {
      std::string body = manifest_body;
      body.replace(body.find(listed), listed.size(),
                   name + " " + std::to_string(d.size()) + " " + optim::detail::hex32(crc32c(bytes_of(d))) + "\n");
      return std::vector<std::pair<fs::path, std::string>>{{path, d}, {manifest, seal_text(body)}};
    });
  }
  return all;
}

template <class State, class C>
fuzz_counts fuzz_reader(C& comm, State& state) {
  const fs::path folder = shared_folder(comm, std::string("checkpoint-fuzz-") + state.kind);
  state.set(2, 0);
  state.save(folder);
  long text_bytes = 0, binary_bytes = 0;
  const auto damages = damages_of(folder, text_bytes, binary_bytes);
  std::map<fs::path, std::string> originals;
  for (const auto& entry : fs::recursive_directory_iterator(folder))
    if (entry.is_regular_file()) originals[entry.path()] = file_text(entry.path());

  fuzz_counts counts;
  for (const damage& d : damages) {
    comm.barrier();
    if (comm.rank() == 0)
      for (const auto& [path, text] : d.files) write_text(path, text);
    comm.barrier();
    state.set(0, 0);
    std::int32_t refused = 0;
    try {
      state.load(folder);
    } catch (const shardwise::error&) {
      refused = 1;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "a damaged checkpoint threw something that is not a shardwise::error: " << e.what();
      refused = 1;
    }
    comm.all_reduce(std::span<std::int32_t>(&refused, 1));  // every rank reads the same files
    (d.resealed ? counts.resealed : counts.damaged) += 1;
    (d.resealed ? counts.resealed_refused : counts.damaged_refused) += refused != 0 ? 1 : 0;
    // A damage the checksums could not see would load; it must load the saved values then.
    if (refused == 0 && !d.resealed) {
      EXPECT_EQ(state.differences(2, 0), "") << "a damaged checkpoint loaded other data: " << d.files.front().first;
    }
    comm.barrier();
    if (comm.rank() == 0)
      for (const auto& [path, text] : d.files) write_text(path, originals.at(path));
  }
  // The checkpoint itself, restored, still loads.
  comm.barrier();
  state.load(folder);
  EXPECT_EQ(state.differences(2, 0), "");
  if (comm.rank() == 0) {
    std::printf(
        "checkpoint reader fuzzed (%s, %d ranks; files of %ld text and %ld binary bytes): %ld damaged copies, "
        "%ld refused; %ld with recomputed checksums, %ld refused, %ld loaded\n",
        state.kind, comm.size(), text_bytes, binary_bytes, counts.damaged, counts.damaged_refused, counts.resealed,
        counts.resealed_refused, counts.resealed - counts.resealed_refused);
    fs::remove_all(folder);
  }
  return counts;
}

TYPED_TEST(checkpoint_files, every_truncated_or_flipped_file_is_refused_with_a_shardwise_error) {
  TypeParam::run(
      [](communicator auto& comm) {
        for_each_kind(comm, [&](auto& state) {
          const fuzz_counts counts = fuzz_reader(comm, state);
          EXPECT_GT(counts.damaged, 500);
          EXPECT_EQ(counts.damaged_refused, counts.damaged) << "every damage the checksums see is refused";
          EXPECT_GT(counts.resealed_refused, counts.resealed / 2) << "the parsers refuse most damages on their own";
        });
      },
      {1, 3});
}

}  // namespace
