// Checkpoint directory rules (train/checkpoint/checkpoint_dir.h) and the XXH64 checksum: published
// hash vectors; a manifest round-trips; a truncated or corrupted file is named; only manifests make
// checkpoints; pruning keeps the newest K and removes stale incomplete ones.
#include "train/checkpoint/checkpoint_dir.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "core/testing/test_support.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/checkpoint_checksum.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;
using testing::error_of;

TEST(Xxhash64Test, MatchesPublishedVectors) {
  EXPECT_EQ(xxhash64("", 0), 0xEF46DB3751D8E999ULL);
  EXPECT_EQ(xxhash64("a", 1), 0xD24EC4F1A98C6E5BULL);
  EXPECT_EQ(xxhash64("abc", 3), 0x44BC2CF5AD770999ULL);
  // 39 bytes: covers the 32-byte stripe loop, the 8-, 4- and 1-byte tails.
  const std::string text = "Nobody inspects the spammish repetition";
  EXPECT_EQ(xxhash64(text.data(), text.size()), 0xFBCEA83C8A378BF1ULL);
  uint64_t parsed = 0;
  EXPECT_TRUE(parse_xxhash64_hex(xxhash64_hex(0x0123456789abcdefULL), &parsed));
  EXPECT_EQ(parsed, 0x0123456789abcdefULL);
  EXPECT_FALSE(parse_xxhash64_hex("0123", &parsed));
  EXPECT_FALSE(parse_xxhash64_hex("0123456789abcdeg", &parsed));
}

class CheckpointDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        (fs::temp_directory_path() / ("shardtrain_ckptdir_" + std::to_string(getpid()))).string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A checkpoint with one file; complete = with its manifest.
  std::string make_checkpoint(int64_t step, bool complete) {
    const std::string step_dir = step_dir_path(dir_, step);
    fs::create_directories(step_dir);
    const std::string contents = "shard bytes of step " + std::to_string(step);
    std::ofstream(step_dir + "/rank_00000.safetensors", std::ios::binary) << contents;
    if (complete) {
      write_manifest(
          step_dir,
          {step,
           {{"rank_00000.safetensors", file_xxhash64(step_dir + "/rank_00000.safetensors")}}});
    }
    return step_dir;
  }

  std::string dir_;
};

TEST_F(CheckpointDirTest, NamesAreZeroPadded) {
  EXPECT_EQ(step_dir_name(10), "step_00000010");
  EXPECT_EQ(rank_file_name(3), "rank_00003.safetensors");
}

TEST_F(CheckpointDirTest, ManifestRoundTripsAndVerifies) {
  const std::string step_dir = make_checkpoint(5, true);
  const Manifest manifest = read_manifest(step_dir);
  EXPECT_EQ(manifest.step, 5);
  ASSERT_EQ(manifest.files.size(), 1u);
  const ManifestEntry& entry = manifest.files[0];
  EXPECT_EQ(entry.digest.bytes, std::string("shard bytes of step 5").size());
  EXPECT_EQ(error_of([&] { verify_checkpoint_file(step_dir, entry); }), "");

  // One flipped byte: same size, other checksum.
  {
    std::fstream f(step_dir + "/rank_00000.safetensors",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(3);
    f.put('X');
  }
  std::string error = error_of([&] { verify_checkpoint_file(step_dir, entry); });
  EXPECT_NE(error.find("rank_00000.safetensors is corrupt"), std::string::npos) << error;

  fs::resize_file(step_dir + "/rank_00000.safetensors", 4);
  error = error_of([&] { verify_checkpoint_file(step_dir, entry); });
  EXPECT_NE(error.find("rank_00000.safetensors is truncated"), std::string::npos) << error;

  fs::remove(step_dir + "/rank_00000.safetensors");
  error = error_of([&] { verify_checkpoint_file(step_dir, entry); });
  EXPECT_NE(error.find("is missing"), std::string::npos) << error;
}

TEST_F(CheckpointDirTest, OnlyManifestsMakeCheckpoints) {
  make_checkpoint(5, true);
  make_checkpoint(10, false);
  fs::create_directories(dir_ + "/step_abc");  // not a step dir
  EXPECT_EQ(complete_checkpoint_steps(dir_), std::vector<int64_t>({5}));
  EXPECT_EQ(incomplete_checkpoint_steps(dir_), std::vector<int64_t>({10}));
  const std::string error = error_of([&] { read_manifest(step_dir_path(dir_, 10)); });
  EXPECT_NE(error.find("step_00000010 is incomplete"), std::string::npos) << error;
  EXPECT_TRUE(complete_checkpoint_steps(dir_ + "/absent").empty());
}

TEST_F(CheckpointDirTest, PruneKeepsNewestAndDropsStaleIncomplete) {
  make_checkpoint(5, true);
  make_checkpoint(7, false);  // interrupted, older than the newest complete: removed
  make_checkpoint(10, true);
  make_checkpoint(15, true);
  make_checkpoint(20, false);  // in progress (newer than every complete one): kept
  prune_checkpoints(dir_, 2);
  EXPECT_EQ(complete_checkpoint_steps(dir_), std::vector<int64_t>({10, 15}));
  EXPECT_EQ(incomplete_checkpoint_steps(dir_), std::vector<int64_t>({20}));
  prune_checkpoints(dir_, 1);
  EXPECT_EQ(complete_checkpoint_steps(dir_), std::vector<int64_t>({15}));
}

TEST_F(CheckpointDirTest, RankDigestsAreCollectedInRankOrderAndRemoved) {
  const std::string step_dir = make_checkpoint(5, false);
  write_rank_digest(step_dir, 1, {"rank_00001.safetensors", {10, 0xabcULL}});
  write_rank_digest(step_dir, 0, {"rank_00000.safetensors", {20, 0xdefULL}});
  const std::vector<ManifestEntry> entries = take_rank_digests(step_dir);
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].file, "rank_00000.safetensors");
  EXPECT_EQ(entries[0].digest.xxh64, 0xdefULL);
  EXPECT_EQ(entries[1].digest.bytes, 10u);
  EXPECT_TRUE(take_rank_digests(step_dir).empty());
}

// Resuming rewrites the metrics JSONL from the checkpoint's step (train/checkpoint/checkpoint.h).
class TruncateMetricsTest : public testing::TempDirTest {
 protected:
  static std::string read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
};

TEST_F(TruncateMetricsTest, KeepsTheStepsUpToTheCheckpointAndDropsATornLastRecord) {
  const std::string metrics = write("metrics.jsonl",
                                    "{\"step\": 1, \"loss\": 2.5}\n\n{\"step\": 2, \"loss\": 2.4}\n"
                                    "{\"step\": 3, \"loss\": 2.3}\n{\"step\": 4, \"lo");
  truncate_metrics_after(metrics, 2);
  EXPECT_EQ(read(metrics), "{\"step\": 1, \"loss\": 2.5}\n{\"step\": 2, \"loss\": 2.4}\n");
  truncate_metrics_after(path("absent.jsonl"), 2);  // no file: nothing to do
  EXPECT_FALSE(fs::exists(path("absent.jsonl")));
  // A stream is not rewritten, nor read: a FIFO with no writer would block the read forever.
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
  truncate_metrics_after(path("fifo"), 2);
  EXPECT_TRUE(fs::is_fifo(path("fifo")));
}

// A --metrics path that names someone else's file is refused, and the file keeps every byte.
TEST_F(TruncateMetricsTest, AFileThatIsNotOursIsLeftAsItIs) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"step\": 1}\nmy notes: not JSON\n{\"step\": 2}\n", "notes.txt:2: not a shardtrain"},
      {"{\"step\": 1}\n{\"loss\": 2.0}\n", "notes.txt:2: not a shardtrain"},
      {"[1, 2]\n", "notes.txt:1: not a shardtrain"},
      {"{\"step\": \"one\"}\n", "notes.txt:1: not a shardtrain"},
      {"{\"step\": 1}\n" + std::string(100000, '[') + "\n{\"step\": 2}\n",
       "notes.txt:2: not a shardtrain"},
  };
  for (const auto& [contents, expected] : cases) {
    const std::string notes = write("notes.txt", contents);
    const std::string message = error_of([&] { truncate_metrics_after(notes, 1); });
    EXPECT_NE(message.find(expected), std::string::npos) << contents << " -> " << message;
    EXPECT_NE(message.find("pass the run's own metrics file or a new path"), std::string::npos);
    EXPECT_EQ(read(notes), contents);
  }
  // One line past the JSONL bound (a sparse file without newlines): refused unread.
  const std::string big = write("big.jsonl", "{\"step\": 1}\n");
  ASSERT_EQ(::truncate(big.c_str(), 300 << 20), 0);
  const std::string message = error_of([&] { truncate_metrics_after(big, 1); });
  EXPECT_NE(message.find("big.jsonl:2: the line is longer than 256 MiB"), std::string::npos)
      << message;
  EXPECT_EQ(fs::file_size(big), uintmax_t{300} << 20);
}

}  // namespace
}  // namespace shardtrain
