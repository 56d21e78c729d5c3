// read_small_file: the inputs that would hang a read or grow it without bound are refused
// before a byte is read, each with one line naming the path; a genuine file reads whole.
#include "io/read_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "core/testing/test_support.h"

namespace shardtrain {
namespace {

std::string message_of(const std::string& path, std::uintmax_t max_bytes) {
  try {
    read_small_file(path, max_bytes, "config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "(read)";
}

TEST(ReadSmallFile, ReadsARegularFileWhole) {
  const testing::TempDir dir("read_small_file_");
  const std::string path = dir.path() + "/config.json";
  std::ofstream(path, std::ios::binary) << std::string("{\"a\": 1}\0x", 10);
  EXPECT_EQ(read_small_file(path, 10, "config.json"), std::string("{\"a\": 1}\0x", 10));
}

TEST(ReadSmallFile, RefusesAFifoADeviceADirectoryAndAnOversizedFileUnread) {
  const testing::TempDir dir("read_small_file_");
  // A FIFO nobody writes: opening it to read would block forever.
  const std::string fifo = dir.path() + "/config.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string message = message_of(fifo, 1 << 20);
  EXPECT_NE(message.find(fifo + ": not a regular file"), std::string::npos) << message;
  EXPECT_NE(message.find("config.json must be a file"), std::string::npos) << message;
  // A link to /dev/zero: a read would never end.
  const std::string zero = dir.path() + "/zero.json";
  std::filesystem::create_symlink("/dev/zero", zero);
  message = message_of(zero, 1 << 20);
  EXPECT_NE(message.find(zero + ": not a regular file"), std::string::npos) << message;
  message = message_of(dir.path(), 1 << 20);
  EXPECT_NE(message.find(dir.path() + ": not a regular file"), std::string::npos) << message;
  // 3 GiB without the disk: sparse.
  const std::string huge = dir.path() + "/huge.json";
  std::ofstream(huge).close();
  std::filesystem::resize_file(huge, std::uintmax_t{3} << 30);
  message = message_of(huge, std::uintmax_t{16} << 20);
  EXPECT_NE(message.find(huge + ": 3221225472 bytes, over the 16 MiB a config.json may have"),
            std::string::npos)
      << message;
  // A missing file: read_file's message.
  message = message_of(dir.path() + "/missing.json", 1 << 20);
  EXPECT_NE(message.find("cannot read " + dir.path() + "/missing.json"), std::string::npos)
      << message;
}

}  // namespace
}  // namespace shardtrain
