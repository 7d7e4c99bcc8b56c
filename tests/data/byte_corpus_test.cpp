// data::byte_corpus on files it writes itself: which files a folder contributes and in what order, the
// split, batches checked byte for byte against the offsets they were drawn at, and the errors.
#include "shardwise/data/byte_corpus.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using shardwise::data::byte_corpus;
using shardwise::data::data_error;

class byte_corpus_test : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("shardwise-byte-corpus-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  void write(const fs::path& relative, const std::string& text) const {
    fs::create_directories((root_ / relative).parent_path());
    std::ofstream(root_ / relative, std::ios::binary) << text;
  }

  fs::path root_;
};

std::string as_text(std::span<const std::uint8_t> bytes) { return {bytes.begin(), bytes.end()}; }

TEST_F(byte_corpus_test, a_folder_is_its_regular_files_in_path_order_without_links_and_indexes) {
  write("b/second", "BBBB");
  write("a", "AAAA");
  write("b/first", "CCCC");
  write("a.dat", "index");
  fs::create_symlink(root_ / "a", root_ / "link");
  const byte_corpus corpus(root_, 0.25);
  // a, b/first, b/second: 12 bytes, the last quarter held out.
  EXPECT_EQ(as_text(corpus.training()), "AAAACCCCB");
  EXPECT_EQ(as_text(corpus.validation()), "BBB");
  const byte_corpus one_file(root_ / "b" / "first", 0.5);
  EXPECT_EQ(as_text(one_file.training()), "CC");
}

TEST_F(byte_corpus_test, batches_are_windows_and_their_next_bytes_keyed_by_step_and_global_sample) {
  std::string text;
  for (int i = 0; i < 500; ++i) text += static_cast<char>('a' + (i * 7) % 26);
  write("text", text);
  const byte_corpus corpus(root_ / "text");
  const auto split = corpus.training();
  const long context = 8;
  const auto batch = corpus.training_batch(3, 1, 2, 4, context, 42);
  ASSERT_EQ(batch.tokens.size(), 32u);
  ASSERT_EQ(batch.targets.size(), 32u);
  for (long s = 0; s < 4; ++s) {
    // Each sample is a window of the training split; its targets are the same window one byte later.
    const auto first = batch.tokens.begin() + s * context;
    const auto at = std::search(split.begin(), split.end(), first, first + context,
                                [](std::uint8_t a, std::int32_t b) { return a == b; });
    ASSERT_NE(at, split.end()) << "sample " << s;
    for (long t = 0; t < context; ++t)
      EXPECT_EQ(batch.targets[static_cast<std::size_t>(s * context + t)], *(at + t + 1));
  }
  // The same global samples whatever the split into slots: slot 1 of 2 x 4 samples is slots 2 and 3 of 4 x 2.
  const auto a = corpus.training_batch(3, 2, 4, 2, context, 42);
  const auto b = corpus.training_batch(3, 3, 4, 2, context, 42);
  std::vector<std::int32_t> joined = a.tokens;
  joined.insert(joined.end(), b.tokens.begin(), b.tokens.end());
  EXPECT_EQ(joined, batch.tokens);
  EXPECT_EQ(corpus.training_batch(3, 1, 2, 4, context, 42).tokens, batch.tokens) << "deterministic";
  EXPECT_NE(corpus.training_batch(4, 1, 2, 4, context, 42).tokens, batch.tokens) << "another step";
  EXPECT_NE(corpus.training_batch(3, 0, 2, 4, context, 42).tokens, batch.tokens) << "another replica";
  EXPECT_NE(corpus.training_batch(3, 1, 2, 4, context, 43).tokens, batch.tokens) << "another seed";
  EXPECT_EQ(corpus.validation_batch(0, 0, 1, 2, context).tokens, corpus.validation_batch(0, 0, 1, 2, context).tokens);

  // A training split of one window and its target (9 of 10 bytes) has one place to start: a window one
  // byte later would take its last target from the validation split.
  write("one-window", "abcdefghij");
  const byte_corpus one_window(root_ / "one-window");
  const auto only = one_window.training_batch(3, 0, 1, 32, context, 42);
  for (long s = 0; s < 32; ++s) {
    const auto first = static_cast<std::ptrdiff_t>(s * context);
    EXPECT_EQ(std::string(only.tokens.begin() + first, only.tokens.begin() + first + context), "abcdefgh") << s;
    EXPECT_EQ(std::string(only.targets.begin() + first, only.targets.begin() + first + context), "bcdefghi") << s;
  }
}

TEST_F(byte_corpus_test, errors_name_the_path_and_the_problem) {
  const auto expect_error = [](const auto& make, const std::string& words) {
    try {
      make();
      FAIL() << "no error; expected one saying \"" << words << "\"";
    } catch (const data_error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  expect_error([&] { byte_corpus c(root_ / "missing"); }, "missing: no such file or folder");
  fs::create_directories(root_ / "empty");
  write("only-index/x.dat", "index");
  expect_error([&] { byte_corpus c(root_ / "empty"); }, "has no text files");
  expect_error([&] { byte_corpus c(root_ / "only-index"); }, "has no text files");
  fs::create_symlink(root_ / "loop-b", root_ / "loop-a");  // each link names the other: no file at the end
  fs::create_symlink(root_ / "loop-a", root_ / "loop-b");
  expect_error([&] { byte_corpus c(root_ / "loop-a"); }, "loop-a: Too many levels of symbolic links");
  fs::create_symlink(root_ / "gone", root_ / "dangling");
  expect_error([&] { byte_corpus c(root_ / "dangling"); },
               "dangling: a symbolic link to " + (root_ / "gone").string() + ", which leads nowhere");
  write("nothing", "");
  expect_error([&] { byte_corpus c(root_ / "nothing"); }, "the corpus is empty");
  write("short", "0123456789");
  const byte_corpus corpus(root_ / "short");
  expect_error([&] { (void)corpus.training_batch(1, 0, 1, 1, 16, 1); }, "fewer than one sample of 16 tokens");
  expect_error([&] { (void)corpus.training_batch(1, 2, 2, 1, 4, 1); }, "slot 2 of 2");
}

}  // namespace
