// Several sources for data.path: files, globs and directories expand in a fixed order, bad
// sources and weights are named, and the weighted mixture gives each source its share,
// deterministically for a seed.
#include "data/mixture_dataset.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "core/testing/test_support.h"
#include "data/data_sources.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;
using testing::error_of;

class MixtureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("shardtrain_mixture_" + std::to_string(::getpid()));
    fs::create_directories(dir_ / "shards");
  }
  void TearDown() override { fs::remove_all(dir_); }
  // `lines` sequences whose first id is `first_id` + line (so each sequence says where it is from).
  std::string write_jsonl(const std::string& name, int lines, int first_id) {
    const fs::path path = dir_ / name;
    std::ofstream out(path);
    for (int i = 0; i < lines; ++i) {
      out << "{\"input_ids\": [" << first_id + i << ", 1, 2, 3]}\n";
    }
    return path.string();
  }
  std::unique_ptr<SequenceDataset> open(const std::string& path) {
    return open_dataset(path, DataFormat::kJsonl, 4, 0);
  }
  fs::path dir_;
};

TEST_F(MixtureTest, SourcesExpandFilesGlobsAndDirectoriesInOrder) {
  const std::string a = write_jsonl("a.jsonl", 2, 100);
  write_jsonl("shards/s2.jsonl", 1, 200);
  write_jsonl("shards/s1.jsonl", 1, 300);
  std::ofstream(dir_ / "shards" / "notes.txt") << "not data";
  const std::vector<DataSource> sources = expand_data_sources(
      a + ", " + (dir_ / "shards" / "*.jsonl").string() + "," + (dir_ / "shards").string(),
      "data.path");
  ASSERT_EQ(sources.size(), 3u);
  EXPECT_EQ(sources[0].files, std::vector<std::string>{a});
  const std::vector<std::string> shards = {(dir_ / "shards" / "s1.jsonl").string(),
                                           (dir_ / "shards" / "s2.jsonl").string()};
  EXPECT_EQ(sources[1].files, shards) << "glob matches, sorted";
  EXPECT_EQ(sources[2].files, shards) << "a directory's data files, sorted; notes.txt left out";
  EXPECT_TRUE(names_several_files(a + "," + a));
  EXPECT_TRUE(names_several_files((dir_ / "shards").string()));
  EXPECT_FALSE(names_several_files(a));
}

TEST_F(MixtureTest, AFifoSourceIsRefusedUnread) {
  const std::string a = write_jsonl("a.jsonl", 2, 100);
  const std::string fifo = (dir_ / "fifo.jsonl").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string message = error_of([&] { expand_data_sources(a + "," + fifo, "data.path"); });
  EXPECT_NE(message.find("data.path: '" + fifo + "' is not a regular file"), std::string::npos)
      << message;
}

TEST_F(MixtureTest, BadSourcesAndWeightsAreNamed) {
  const std::string missing = (dir_ / "missing.jsonl").string();
  EXPECT_NE(error_of([&] {
              expand_data_sources(missing, "data.path");
            }).find("data.path: '" + missing + "' does not exist"),
            std::string::npos);
  const std::string pattern = (dir_ / "none*.jsonl").string();
  EXPECT_NE(error_of([&] {
              expand_data_sources(pattern, "data.path");
            }).find("no file matches '" + pattern + "'"),
            std::string::npos);
  fs::create_directories(dir_ / "empty");
  EXPECT_NE(error_of([&] {
              expand_data_sources((dir_ / "empty").string(), "data.eval_path");
            }).find("data.eval_path: directory"),
            std::string::npos);
  const std::string a = write_jsonl("a.jsonl", 2, 100);
  EXPECT_NE(error_of([&] { expand_data_sources(a + ",,", "data.path"); }).find("empty source"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_source_weights("1,2,3", 2); }).find("3 weights for 2 sources"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_source_weights("1,x", 2); }).find("'x' is not a number >= 0"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_source_weights("1,-2", 2); }).find("'-2' is not a number"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_source_weights("0,0", 2); }).find("every weight is 0"),
            std::string::npos);
  EXPECT_EQ(parse_source_weights(" 3, 0.5 ", 2), (std::vector<double>{3, 0.5}));
  EXPECT_TRUE(parse_source_weights("", 2).empty());
}

TEST_F(MixtureTest, NaturalSizesConcatenateEverySequenceOnce) {
  std::vector<std::unique_ptr<SequenceDataset>> parts;
  parts.push_back(open(write_jsonl("a.jsonl", 3, 100)));
  parts.push_back(open(write_jsonl("b.jsonl", 2, 200)));
  const MixtureDataset mix(std::move(parts), {}, 7);
  ASSERT_EQ(mix.size(), 5u);
  std::vector<int32_t> firsts;
  for (size_t i = 0; i < mix.size(); ++i) firsts.push_back(mix.get(i).input_ids[0]);
  EXPECT_EQ(firsts, (std::vector<int32_t>{100, 101, 102, 200, 201}));
  EXPECT_EQ(mix.max_token_id(), 201);
  EXPECT_NE(mix.describe_example(3).find("b.jsonl:1"), std::string::npos)
      << mix.describe_example(3);
}

TEST_F(MixtureTest, WeightsGiveSharesRepeatingOrSubsamplingDeterministically) {
  const auto build = [&](uint64_t seed) {
    std::vector<std::unique_ptr<SequenceDataset>> parts;
    parts.push_back(open(write_jsonl("a.jsonl", 10, 100)));
    parts.push_back(open(write_jsonl("b.jsonl", 4, 200)));
    return std::make_unique<MixtureDataset>(std::move(parts), std::vector<double>{1, 3}, seed);
  };
  const auto mix = build(7);
  // Natural total 14: a gets round(14 / 4) = 4 (a subset of its 10), b gets round(14 x 3/4) =
  // 11 (all 4 twice plus 3).
  EXPECT_EQ(mix->count_of(0), 4u);
  EXPECT_EQ(mix->count_of(1), 11u);
  ASSERT_EQ(mix->size(), 15u);
  std::map<int32_t, int> seen;
  for (size_t i = 0; i < mix->size(); ++i) ++seen[mix->get(i).input_ids[0]];
  int from_a = 0;
  for (int id = 100; id < 110; ++id) {
    EXPECT_LE(seen[id], 1) << "a is subsampled, never repeated";
    from_a += seen[id];
  }
  EXPECT_EQ(from_a, 4);
  for (int id = 200; id < 204; ++id) EXPECT_GE(seen[id], 2) << "b's sequences all twice or more";
  // Deterministic for a seed; another seed picks another subset of a.
  const auto again = build(7);
  const auto other = build(8);
  bool differs = false;
  for (size_t i = 0; i < mix->size(); ++i) {
    EXPECT_EQ(again->get(i).input_ids, mix->get(i).input_ids);
    differs = differs || other->get(i).input_ids != mix->get(i).input_ids;
  }
  EXPECT_TRUE(differs);
}

}  // namespace
}  // namespace shardtrain
