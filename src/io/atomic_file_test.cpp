// AtomicFileWriter (io/atomic_file.h): the new contents replace a regular file (or a link's
// regular target) whole; a path that is a directory, FIFO, socket or device is refused before
// anything is written and left as it was; the temp file is never created through a link or over
// another file's contents; an abandoned writer leaves nothing behind.
#include "io/atomic_file.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "core/error.h"
#include "core/testing/test_support.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;

std::string contents_of(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class AtomicFileTest : public testing::TempDirTest {
 protected:
  std::string temp_of(const std::string& p) const {
    return p + ".tmp." + std::to_string(::getpid());
  }
  // The entries of the test dir: a refused write adds none.
  size_t entries() const {
    size_t n = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(path(""))) ++n;
    return n;
  }
};

TEST_F(AtomicFileTest, ReplacesARegularFileAndALinksTarget) {
  const std::string file = write("a.txt", "old");
  write_file_atomically(file, "new contents");
  EXPECT_EQ(contents_of(file), "new contents");
  EXPECT_FALSE(fs::exists(temp_of(file)));
  const std::string link = path("link.txt");
  fs::create_symlink(file, link);
  write_file_atomically(link, "through the link");
  EXPECT_EQ(contents_of(link), "through the link");
  EXPECT_EQ(contents_of(file), "new contents") << "the link is replaced, its target kept";
}

TEST_F(AtomicFileTest, RefusesToReplaceWhatIsNotARegularFile) {
  const std::string dir = path("out_dir");
  fs::create_directory(dir);
  const std::string fifo = path("out.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string socket_path = path("out.sock");
  const int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(sock, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  ASSERT_LT(socket_path.size(), sizeof(address.sun_path));
  socket_path.copy(address.sun_path, socket_path.size());
  ASSERT_EQ(::bind(sock, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0);
  const std::string link_to_dir = path("dir_link");
  fs::create_directory_symlink(dir, link_to_dir);
  const size_t before = entries();
  const struct {
    std::string path, kind;
  } cases[] = {{dir, "a directory"},
               {fifo, "a FIFO"},
               {socket_path, "a socket"},
               {link_to_dir, "a directory"},
               {"/dev/null", "a character device"}};
  for (const auto& c : cases) {
    const std::string message = testing::error_of([&] { write_file_atomically(c.path, "x"); });
    EXPECT_EQ(message, c.path + " exists and is " + c.kind +
                           ", which is not replaced by a file; HINT: write to another path");
    EXPECT_FALSE(fs::exists(temp_of(c.path))) << c.path;
  }
  ::close(sock);
  EXPECT_EQ(entries(), before) << "nothing written beside them";
  EXPECT_TRUE(fs::is_directory(dir));
  EXPECT_TRUE(fs::is_fifo(fifo));
  EXPECT_TRUE(fs::is_socket(socket_path));
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
}

TEST_F(AtomicFileTest, TheTempFileIsNeverALinkOrSomeoneElsesFile) {
  const std::string out = path("model.bin");
  // A link planted where the temp file goes: not followed, not removed; the write is refused.
  const std::string victim = write("victim.txt", "keep me");
  fs::create_symlink(victim, temp_of(out));
  const std::string message = testing::error_of([&] { write_file_atomically(out, "data"); });
  EXPECT_NE(message.find("cannot create " + temp_of(out)), std::string::npos) << message;
  EXPECT_EQ(contents_of(victim), "keep me");
  EXPECT_TRUE(fs::is_symlink(temp_of(out)));
  EXPECT_FALSE(fs::exists(out));
  fs::remove(temp_of(out));
  // A regular leftover of that name (a run with this pid that died before commit) is replaced.
  write("model.bin.tmp." + std::to_string(::getpid()), "stale partial write");
  write_file_atomically(out, "data");
  EXPECT_EQ(contents_of(out), "data");
  EXPECT_FALSE(fs::exists(temp_of(out)));
}

TEST_F(AtomicFileTest, AnAbandonedWriterLeavesTheOldFile) {
  const std::string file = write("b.txt", "old");
  {
    AtomicFileWriter writer(file);
    writer.write("partial", 7);
    EXPECT_TRUE(fs::exists(writer.temp_path()));
  }
  EXPECT_EQ(contents_of(file), "old");
  EXPECT_FALSE(fs::exists(temp_of(file)));
}

TEST_F(AtomicFileTest, AnOutputThatBecameADirectoryIsRefusedAtCommit) {
  const std::string out = path("late");
  AtomicFileWriter writer(out);
  writer.write("abc", 3);
  fs::create_directory(out);
  const std::string message = testing::error_of([&] { writer.commit(); });
  EXPECT_NE(message.find("exists and is a directory"), std::string::npos) << message;
  EXPECT_TRUE(fs::is_directory(out));
  EXPECT_FALSE(fs::exists(temp_of(out)));
}

}  // namespace
}  // namespace shardtrain
