// Safetensors, HF checkpoint directories and atomic writes, run under AddressSanitizer: every
// malformed input must throw shardtrain::Error naming the file, never read out of bounds.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/hf_checkpoint.h"
#include "io/mapped_file.h"
#include "io/safetensors.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;
using Bytes = std::string;

class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = fs::temp_directory_path() /
            ("shardtrain_io_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

Bytes read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_bytes(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

Bytes length_prefix(uint64_t n) {
  Bytes out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out;
}

// Expects `action` to throw Error whose message contains every string in `needles`.
void expect_error(const std::function<void()>& action, const std::vector<std::string>& needles) {
  try {
    action();
    ADD_FAILURE() << "no Error thrown; expected one containing '" << needles[0] << "'";
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const std::string& needle : needles) {
      EXPECT_NE(message.find(needle), std::string::npos)
          << "message '" << message << "' lacks '" << needle << "'";
    }
    EXPECT_EQ(message.find('\n'), std::string::npos) << "message is not one line: " << message;
  }
}

// Test tensors: a F32 [2,3], b BF16 [4], c F16 [2], d I32 [3].
const std::vector<float> kA = {1.0f, -2.0f, 3.5f, 0.25f, -0.125f, 1e-3f};
const std::vector<uint16_t> kBBits = {0x3f80, 0xc040, 0x3c00, 0x7f7f};  // 1, -3, 2^-7, bf16 max
const std::vector<float> kBValues = {1.0f, -3.0f, 0.0078125f, 3.3895313892515355e38f};
const std::vector<uint16_t> kCBits = {0x7bff, 0x0001};  // f16 max 65504, smallest subnormal
const std::vector<float> kCValues = {65504.0f, 5.9604644775390625e-08f};
const std::vector<int32_t> kD = {7, -8, 2147483647};

void write_test_file(const std::string& path, std::map<std::string, std::string> metadata = {}) {
  SafetensorsWriter writer(path,
                           {{"a", DType::kF32, {2, 3}},
                            {"b", DType::kBF16, {4}},
                            {"c", DType::kF16, {2}},
                            {"d", DType::kI32, {3}}},
                           std::move(metadata));
  writer.write_tensor("a", kA.data(), kA.size() * 4);
  writer.write_tensor("b", kBBits.data(), kBBits.size() * 2);
  writer.write_tensor("c", kCBits.data(), kCBits.size() * 2);
  writer.write_tensor("d", kD.data(), kD.size() * 4);
  writer.finish();
}

// A valid file split into its header JSON and data section, for byte-level corruption.
struct SplitFile {
  nlohmann::ordered_json header;
  Bytes data;
};

SplitFile split_valid_file(const TempDir& dir) {
  const std::string path = dir.file("valid.safetensors");
  write_test_file(path);
  const Bytes bytes = read_bytes(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  return {nlohmann::ordered_json::parse(bytes.substr(8, n)), bytes.substr(8 + n)};
}

Bytes assemble(const std::string& header_text, const Bytes& data) {
  return length_prefix(header_text.size()) + header_text + data;
}

TEST(SafetensorsTest, RoundTripsValuesDtypesShapesAndMetadata) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  write_test_file(path, {{"format", "pt"}});
  EXPECT_FALSE(fs::exists(path + ".tmp." + std::to_string(::getpid())));
  // Header is padded so the data section starts 8-byte aligned.
  const Bytes bytes = read_bytes(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + n + 24 + 8 + 4 + 12);

  SafetensorsFile file = SafetensorsFile::open(path);
  SafetensorsFile moved = std::move(file);  // entries must survive a move
  ASSERT_EQ(moved.entries().size(), 4u);
  EXPECT_EQ(moved.path(), path);
  EXPECT_EQ(moved.metadata().at("format"), "pt");
  EXPECT_EQ(moved.find("missing"), nullptr);

  const SafetensorsEntry* a = moved.find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dtype, DType::kF32);
  EXPECT_EQ(a->shape, Shape({2, 3}));
  EXPECT_EQ(a->bytes, 24u);
  EXPECT_EQ(std::memcmp(a->data, kA.data(), 24), 0);

  const SafetensorsEntry* b = moved.find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dtype, DType::kBF16);
  EXPECT_EQ(b->shape, Shape({4}));
  EXPECT_EQ(std::memcmp(b->data, kBBits.data(), 8), 0);

  const SafetensorsEntry* c = moved.find("c");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->dtype, DType::kF16);
  EXPECT_EQ(std::memcmp(c->data, kCBits.data(), 4), 0);

  const SafetensorsEntry* d = moved.find("d");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->dtype, DType::kI32);
  EXPECT_EQ(d->shape, Shape({3}));
  EXPECT_EQ(std::memcmp(d->data, kD.data(), 12), 0);
}

TEST(SafetensorsTest, AcceptsScalarsAndZeroSizedTensors) {
  TempDir dir;
  const std::string path = dir.file("odd.safetensors");
  SafetensorsWriter writer(path, {{"scalar", DType::kF32, {}}, {"empty", DType::kBF16, {0, 4}}});
  const float one = 1.0f;
  writer.write_tensor("scalar", &one, 4);
  writer.write_tensor("empty", nullptr, 0);
  writer.finish();
  SafetensorsFile file = SafetensorsFile::open(path);
  ASSERT_NE(file.find("scalar"), nullptr);
  EXPECT_EQ(file.find("scalar")->shape.rank(), 0);
  EXPECT_EQ(*static_cast<const float*>(file.find("scalar")->data), 1.0f);
  EXPECT_EQ(file.find("empty")->bytes, 0u);
}

TEST(SafetensorsTest, WriterRejectsMisuseAndLeavesNoFile) {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  const float values[6] = {};
  {
    SafetensorsWriter writer(path, {{"x", DType::kF32, {2}}, {"y", DType::kF32, {3}}});
    expect_error([&] { writer.write_tensor("y", values, 12); }, {path, "'y'", "order"});
    expect_error([&] { writer.write_tensor("x", values, 4); }, {path, "'x'", "8"});
    writer.write_tensor("x", values, 8);
    expect_error([&] { writer.finish(); }, {path, "1 of 2"});
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(fs::is_empty(dir.path()));
  expect_error(
      [&] {
        SafetensorsWriter(path, {{"x", DType::kF32, {1}}, {"x", DType::kF32, {1}}});
      },
      {path, "'x'"});
}

TEST(SafetensorsTest, RejectsMissingFileAndDirectory) {
  TempDir dir;
  const std::string missing = dir.file("nope.safetensors");
  expect_error([&] { SafetensorsFile::open(missing); }, {missing, "does not exist"});
  expect_error([&] { SafetensorsFile::open(dir.path().string()); },
               {dir.path().string(), "directory"});
}

TEST(SafetensorsTest, RejectsTruncatedFiles) {
  TempDir dir;
  const std::string valid = dir.file("valid.safetensors");
  write_test_file(valid);
  const Bytes bytes = read_bytes(valid);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const std::string path = dir.file("corrupt.safetensors");
  const std::string hint = "re-download or re-export";

  write_bytes(path, "");
  expect_error([&] { SafetensorsFile::open(path); }, {path, "0 bytes", hint});
  write_bytes(path, bytes.substr(0, 5));
  expect_error([&] { SafetensorsFile::open(path); }, {path, "5 bytes", hint});
  write_bytes(path, bytes.substr(0, 8 + n / 2));  // header cut in half
  expect_error([&] { SafetensorsFile::open(path); }, {path, "header", hint});
  write_bytes(path, bytes.substr(0, bytes.size() - 4));  // last tensor cut short
  expect_error([&] { SafetensorsFile::open(path); }, {path, "'d'", "beyond", hint});
  write_bytes(path, bytes.substr(0, 8 + n));  // no data at all
  expect_error([&] { SafetensorsFile::open(path); }, {path, "beyond", hint});
}

TEST(SafetensorsTest, RejectsBadHeaderLengths) {
  TempDir dir;
  write_test_file(dir.file("v.safetensors"));
  const Bytes bytes = read_bytes(dir.file("v.safetensors"));
  const std::string path = dir.file("corrupt.safetensors");
  write_bytes(path, length_prefix(bytes.size()) + bytes.substr(8));  // one past the end
  expect_error([&] { SafetensorsFile::open(path); }, {path, "header", "re-download"});
  write_bytes(path, length_prefix(uint64_t{1} << 40) + bytes.substr(8));
  expect_error([&] { SafetensorsFile::open(path); }, {path, "limit", "re-download"});
  write_bytes(path, length_prefix(~uint64_t{0}) + bytes.substr(8));
  expect_error([&] { SafetensorsFile::open(path); }, {path, "re-download"});
}

TEST(SafetensorsTest, RejectsHeadersThatAreNotJsonObjects) {
  TempDir dir;
  const SplitFile valid = split_valid_file(dir);
  const std::string path = dir.file("corrupt.safetensors");
  for (const std::string& header :
       std::vector<std::string>{"this is not json", "{\"a\": {\"dtype\": ", "[1, 2, 3]", "\"text\"",
                                std::string("{\"a\"\0:1}", 8), "\xff\xfe"}) {
    write_bytes(path, assemble(header, valid.data));
    expect_error([&] { SafetensorsFile::open(path); }, {path, "JSON", "re-download"});
  }
}

// Corrupts one entry of a valid header and expects Error naming the file and that tensor.
void expect_corrupt_entry(const TempDir& dir, const std::string& tensor,
                          const std::function<void(nlohmann::ordered_json&)>& edit,
                          const std::vector<std::string>& extra_needles) {
  SplitFile file = split_valid_file(dir);
  edit(file.header[tensor]);
  const std::string path = dir.file("corrupt.safetensors");
  write_bytes(path, assemble(file.header.dump(), file.data));
  std::vector<std::string> needles = {path, "'" + tensor + "'", "HINT"};
  needles.insert(needles.end(), extra_needles.begin(), extra_needles.end());
  SCOPED_TRACE(file.header.dump());
  expect_error([&] { SafetensorsFile::open(path); }, needles);
}

TEST(SafetensorsTest, RejectsMalformedEntries) {
  TempDir dir;
  using J = nlohmann::ordered_json;
  expect_corrupt_entry(dir, "a", [](J& e) { e = 5; }, {"object"});
  expect_corrupt_entry(dir, "a", [](J& e) { e.erase("dtype"); }, {"dtype"});
  expect_corrupt_entry(dir, "a", [](J& e) { e["dtype"] = 32; }, {"dtype"});
  expect_corrupt_entry(dir, "b", [](J& e) { e.erase("shape"); }, {"shape"});
  expect_corrupt_entry(dir, "b", [](J& e) { e["shape"] = "4"; }, {"shape"});
  expect_corrupt_entry(dir, "c", [](J& e) { e.erase("data_offsets"); }, {"data_offsets"});
  expect_corrupt_entry(dir, "c", [](J& e) { e["data_offsets"] = {32}; }, {"data_offsets"});
  expect_corrupt_entry(dir, "c", [](J& e) { e["data_offsets"] = {"32", "36"}; }, {"offset"});
  expect_corrupt_entry(dir, "c", [](J& e) { e["data_offsets"] = {-4, 4}; }, {"offset"});
}

TEST(SafetensorsTest, RejectsBadDtypesAndShapes) {
  TempDir dir;
  using J = nlohmann::ordered_json;
  // b holds 8 bytes of BF16; declaring F32 claims 16.
  expect_corrupt_entry(dir, "b", [](J& e) { e["dtype"] = "F32"; }, {"8 bytes", "16 bytes"});
  expect_corrupt_entry(dir, "a", [](J& e) { e["shape"] = {3, 3}; }, {"[3, 3]", "36 bytes"});
  expect_corrupt_entry(dir, "a", [](J& e) { e["dtype"] = "F64"; }, {"F64", "not support"});
  expect_corrupt_entry(dir, "d", [](J& e) { e["dtype"] = "BOOL"; }, {"BOOL"});
  expect_corrupt_entry(dir, "a", [](J& e) { e["shape"] = {-2, -3}; }, {"non-negative"});
  expect_corrupt_entry(dir, "a", [](J& e) { e["shape"] = {2.0, 3}; }, {"non-negative integer"});
  expect_corrupt_entry(dir, "a", [](J& e) { e["shape"] = {1, 1, 1, 1, 1, 1, 6}; }, {"7 dim"});
  expect_corrupt_entry(dir, "a",
                       [](J& e) {
                         e["shape"] = {uint64_t{1} << 40, uint64_t{1} << 40};
                       },
                       {"large"});
  expect_corrupt_entry(dir, "a", [](J& e) { e["shape"] = {~uint64_t{0}}; }, {"large"});
}

TEST(SafetensorsTest, RejectsBadOffsets) {
  TempDir dir;
  using J = nlohmann::ordered_json;
  // Data section: a [0,24) b [24,32) c [32,36) d [36,48).
  expect_corrupt_entry(dir, "d", [](J& e) { e["data_offsets"] = {40, 52}; }, {"beyond"});
  expect_corrupt_entry(dir, "d", [](J& e) { e["data_offsets"] = {36, ~uint64_t{0}}; }, {"beyond"});
  expect_corrupt_entry(dir, "c", [](J& e) { e["data_offsets"] = {36, 32}; }, {"begin after end"});
  expect_corrupt_entry(dir, "b", [](J& e) { e["data_offsets"] = {16, 24}; }, {"overlaps", "'a'"});
  expect_corrupt_entry(dir, "c", [](J& e) { e["data_offsets"] = {24, 28}; }, {"overlaps", "'b'"});
}

// What the reference implementation requires and the old check (each tensor against the
// previous one only) let through: a zero-byte tensor between two overlapping tensors, a gap
// between tensors, and bytes after the last tensor.
TEST(SafetensorsTest, RequiresDataRegionsToTileTheDataSection) {
  TempDir dir;
  using J = nlohmann::ordered_json;
  const auto open_with = [&](const std::function<void(SplitFile&)>& edit) {
    SplitFile file = split_valid_file(dir);
    edit(file);
    const std::string path = dir.file("tiled.safetensors");
    write_bytes(path, assemble(file.header.dump(), file.data));
    return path;
  };
  // a [0,24) empty [24,24) b [16,24): b overlaps a across the zero-byte tensor.
  const std::string hidden_overlap = open_with([](SplitFile& f) {
    f.header["empty"] = J{{"dtype", "F32"}, {"shape", {0}}, {"data_offsets", {24, 24}}};
    f.header["b"]["data_offsets"] = {16, 24};
  });
  expect_error([&] { SafetensorsFile::open(hidden_overlap); }, {hidden_overlap, "'b'", "overlaps"});
  // c moved from [32,36) to [36,40), d from [36,48) to [40,52) over 4 more bytes: a gap.
  const std::string gap = open_with([](SplitFile& f) {
    f.header["c"]["data_offsets"] = {36, 40};
    f.header["d"]["data_offsets"] = {40, 52};
    f.data += std::string(4, '\0');
  });
  expect_error([&] { SafetensorsFile::open(gap); }, {gap, "'c'", "gap", "'b'"});
  const std::string trailing = open_with([](SplitFile& f) { f.data += "junk"; });
  expect_error([&] { SafetensorsFile::open(trailing); }, {trailing, "cover 48 bytes of the 52"});
  const std::string late_start = open_with([](SplitFile& f) {
    for (auto& [name, entry] : f.header.items()) {
      if (name == "__metadata__") continue;
      entry["data_offsets"] = {entry["data_offsets"][0].get<uint64_t>() + 8,
                               entry["data_offsets"][1].get<uint64_t>() + 8};
    }
    f.data = std::string(8, '\0') + f.data;
  });
  expect_error([&] { SafetensorsFile::open(late_start); },
               {late_start, "'a'", "gap after the start of the data section"});
  // A zero-byte tensor where the previous one ends is fine.
  const std::string zero_between = open_with([](SplitFile& f) {
    f.header["empty"] = J{{"dtype", "F32"}, {"shape", {0}}, {"data_offsets", {24, 24}}};
  });
  EXPECT_EQ(SafetensorsFile::open(zero_between).find("empty")->bytes, 0u);
}

TEST(AtomicFileTest, CommitReplacesAndAbandonLeavesOldFile) {
  TempDir dir;
  const std::string path = dir.file("state.json");
  write_file_atomically(path, "old");
  EXPECT_EQ(read_bytes(path), "old");
  {
    AtomicFileWriter writer(path);
    writer.write("new contents", 12);
    EXPECT_TRUE(fs::exists(writer.temp_path()));
    EXPECT_EQ(read_bytes(path), "old");
  }  // destroyed without commit
  EXPECT_EQ(read_bytes(path), "old");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);

  AtomicFileWriter writer(path);
  writer.write("new", 3);
  AtomicFileWriter moved = std::move(writer);
  moved.commit();
  EXPECT_EQ(read_bytes(path), "new");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);

  const std::string bad = dir.file("no/such/dir/file");
  expect_error([&] { write_file_atomically(bad, "x"); }, {bad, "HINT"});

  // Visible-only (no fsync): still a whole replacement, no temp file left, errors as before.
  write_file_atomically(path, "polled", Durability::kVisibleOnly);
  EXPECT_EQ(read_bytes(path), "polled");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
  expect_error([&] { write_file_atomically(bad, "x", Durability::kVisibleOnly); }, {bad, "HINT"});
}

TEST(MappedFileTest, MapsContentsAndEmptyFiles) {
  TempDir dir;
  write_file_atomically(dir.file("f"), "hello");
  MappedFile file = MappedFile::open(dir.file("f"));
  ASSERT_EQ(file.size(), 5u);
  EXPECT_EQ(std::memcmp(file.data(), "hello", 5), 0);
  write_file_atomically(dir.file("empty"), "");
  EXPECT_EQ(MappedFile::open(dir.file("empty")).size(), 0u);
}

// A FIFO named as a weights file is refused at once: its open would wait for a writer forever.
TEST(MappedFileTest, AFifoIsRefusedWithoutWaiting) {
  TempDir dir;
  ASSERT_EQ(::mkfifo(dir.file("model.safetensors").c_str(), 0600), 0);
  expect_error([&] { MappedFile::open(dir.file("model.safetensors")); },
               {dir.file("model.safetensors"), "a special file, not a regular file"});
}

// ---- HfCheckpoint ----

void write_config(const TempDir& dir) { write_file_atomically(dir.file("config.json"), "{}"); }

TEST(HfCheckpointTest, RejectsBadDirectories) {
  TempDir dir;
  const std::string missing = dir.file("absent");
  expect_error([&] { HfCheckpoint::open(missing); }, {missing, "does not exist", "check the path"});
  write_file_atomically(dir.file("plain"), "x");
  expect_error([&] { HfCheckpoint::open(dir.file("plain")); }, {dir.file("plain"), "directory"});
  expect_error([&] { HfCheckpoint::open(dir.path().string()); },
               {dir.path().string(), "config.json"});
  write_config(dir);
  write_file_atomically(dir.file("pytorch_model.bin"), "pickle");
  expect_error([&] { HfCheckpoint::open(dir.path().string()); },
               {dir.path().string(), "model.safetensors", ".bin", "safe_serialization=True"});
}

TEST(HfCheckpointTest, RejectsBadIndexes) {
  TempDir dir;
  write_config(dir);
  const std::string index = dir.file("model.safetensors.index.json");
  const std::string dir_path = dir.path().string();
  write_file_atomically(index, "{not json");
  expect_error([&] { HfCheckpoint::open(dir_path); }, {index, "JSON"});
  write_file_atomically(index, R"({"metadata": {}})");
  expect_error([&] { HfCheckpoint::open(dir_path); }, {index, "weight_map"});
  write_file_atomically(index, R"({"weight_map": {"a": 3}})");
  expect_error([&] { HfCheckpoint::open(dir_path); }, {index, "'a'"});
  write_file_atomically(index, R"({"weight_map": {"a": "../outside.safetensors"}})");
  expect_error([&] { HfCheckpoint::open(dir_path); }, {index, "'a'"});
  write_file_atomically(index, R"({"weight_map": {"a": "model-00001-of-00002.safetensors"}})");
  expect_error([&] { HfCheckpoint::open(dir_path); },
               {index, "model-00001-of-00002.safetensors", "missing", "re-download"});
  write_test_file(dir.file("model-00001-of-00002.safetensors"));
  write_file_atomically(index, R"({"weight_map": {"zz": "model-00001-of-00002.safetensors"}})");
  expect_error([&] { HfCheckpoint::open(dir_path); }, {index, "'zz'", "does not contain"});
}

TEST(HfCheckpointTest, ReadsShardedCheckpointAndConvertsToF32) {
  TempDir dir;
  write_config(dir);
  write_test_file(dir.file("model-00001-of-00002.safetensors"));
  {
    SafetensorsWriter writer(dir.file("model-00002-of-00002.safetensors"),
                             {{"lm_head.weight", DType::kBF16, {2, 2}}});
    writer.write_tensor("lm_head.weight", kBBits.data(), 8);
    writer.finish();
  }
  write_file_atomically(dir.file("model.safetensors.index.json"), R"({
    "metadata": {"total_size": 56},
    "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
                   "c": "model-00001-of-00002.safetensors",
                   "lm_head.weight": "model-00002-of-00002.safetensors"}})");
  const HfCheckpoint checkpoint = HfCheckpoint::open(dir.path().string());
  EXPECT_EQ(checkpoint.dir(), dir.path().string());
  EXPECT_EQ(checkpoint.config_json_path(), dir.file("config.json"));
  EXPECT_EQ(checkpoint.tensor_names(), (std::vector<std::string>{"a", "b", "c", "lm_head.weight"}));
  EXPECT_EQ(checkpoint.find("d"), nullptr);  // in the shard but not in the index

  std::vector<float> a(6);
  checkpoint.read_into_f32("a", {2, 3}, a.data());
  EXPECT_EQ(a, kA);
  std::vector<float> b(4);
  checkpoint.read_into_f32("b", {4}, b.data());
  EXPECT_EQ(b, kBValues);
  std::vector<float> c(2);
  checkpoint.read_into_f32("c", {2}, c.data());
  EXPECT_EQ(c, kCValues);
  std::vector<float> head(4);
  checkpoint.read_into_f32("lm_head.weight", {2, 2}, head.data());
  EXPECT_EQ(head, kBValues);

  std::vector<float> slice(3, -1.0f);
  checkpoint.read_range_into_f32("a", {2, 3}, 2, 3, slice.data());
  EXPECT_EQ(slice, (std::vector<float>{3.5f, 0.25f, -0.125f}));
  checkpoint.read_range_into_f32("lm_head.weight", {2, 2}, 3, 1, slice.data());
  EXPECT_EQ(slice[0], kBValues[3]);
  checkpoint.read_range_into_f32("a", {2, 3}, 6, 0, slice.data());  // empty range at the end

  expect_error([&] { checkpoint.read_into_f32("model.norm.weight", {4}, b.data()); },
               {"'model.norm.weight'", dir.path().string(), "different model type"});
  expect_error(
      [&] {
        checkpoint.read_into_f32("a", {3, 2}, a.data());
      },
      {"'a'", dir.file("model-00001-of-00002.safetensors"), "[2, 3]", "[3, 2]"});
}

TEST(HfCheckpointTest, ReadsSingleFileCheckpointAndRejectsIntegerWeights) {
  TempDir dir;
  write_config(dir);
  write_test_file(dir.file("model.safetensors"));
  const HfCheckpoint checkpoint = HfCheckpoint::open(dir.path().string());
  EXPECT_EQ(checkpoint.tensor_names().size(), 4u);
  ASSERT_NE(checkpoint.find("d"), nullptr);
  EXPECT_EQ(checkpoint.find("d")->dtype, DType::kI32);
  std::vector<float> d(3);
  expect_error([&] { checkpoint.read_into_f32("d", {3}, d.data()); }, {"'d'", "I32"});
}

TEST(HfCheckpointTest, CorruptShardNamesTheShard) {
  TempDir dir;
  write_config(dir);
  write_bytes(dir.file("model.safetensors"), "short");
  expect_error([&] { HfCheckpoint::open(dir.path().string()); },
               {dir.file("model.safetensors"), "re-download"});
}

}  // namespace
}  // namespace shardtrain
