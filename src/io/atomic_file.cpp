#include "io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>

#include "core/error.h"

namespace shardtrain {
namespace {

std::string errno_text() { return std::strerror(errno); }

// Best effort: the rename itself is already durable on most filesystems without it.
void fsync_parent_dir(const std::string& path) {
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (parent.empty()) parent = ".";
  const int dir_fd = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return;
  ::fsync(dir_fd);
  ::close(dir_fd);
}

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// The rename would replace whatever `path` is: refused unless it is a regular file (through a
// symbolic link too) or absent, so a device, FIFO, socket or directory given as an output is
// never removed (as root, `--out /dev/full` replaced the device node with a regular file).
void require_replaceable(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return;
  fail("{} exists and is {}, which is not replaced by a file; HINT: write to another path", path,
       kind_of(st.st_mode));
}

// Creates the temp file without following a link or truncating anything: a leftover temp file
// of this name (a run with the same pid that died before commit) is removed first when it is a
// regular file; anything else there is left alone and refused.
int create_temp(const std::string& temp_path) {
  constexpr int kFlags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  int fd = ::open(temp_path.c_str(), kFlags, 0644);
  if (fd < 0 && errno == EEXIST) {
    struct stat st {};
    if (::lstat(temp_path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      ::unlink(temp_path.c_str());
      fd = ::open(temp_path.c_str(), kFlags, 0644);
    }
  }
  if (fd < 0) {
    fail("cannot create {} ({}); HINT: check that the directory exists and is writable", temp_path,
         errno_text());
  }
  return fd;
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::string path, Durability durability)
    : path_(std::move(path)),
      temp_path_(path_ + ".tmp." + std::to_string(::getpid())),
      durability_(durability) {
  require_replaceable(path_);
  fd_ = create_temp(temp_path_);
}

AtomicFileWriter::~AtomicFileWriter() { discard(); }

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& other) noexcept
    : path_(std::move(other.path_)),
      temp_path_(std::move(other.temp_path_)),
      durability_(other.durability_),
      fd_(std::exchange(other.fd_, -1)),
      bytes_written_(other.bytes_written_) {}

AtomicFileWriter& AtomicFileWriter::operator=(AtomicFileWriter&& other) noexcept {
  if (this != &other) {
    discard();
    path_ = std::move(other.path_);
    temp_path_ = std::move(other.temp_path_);
    durability_ = other.durability_;
    fd_ = std::exchange(other.fd_, -1);
    bytes_written_ = other.bytes_written_;
  }
  return *this;
}

void AtomicFileWriter::discard() noexcept {
  if (fd_ < 0) return;
  ::close(fd_);
  fd_ = -1;
  ::unlink(temp_path_.c_str());
}

void AtomicFileWriter::write(const void* data, size_t bytes) {
  SHARDTRAIN_CHECK(fd_ >= 0, "write to {} after commit", path_);
  const char* cursor = static_cast<const char*>(data);
  size_t left = bytes;
  while (left > 0) {
    const ssize_t n = ::write(fd_, cursor, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      fail("cannot write {} ({}); HINT: check free disk space and permissions", temp_path_,
           errno_text());
    }
    cursor += n;
    left -= static_cast<size_t>(n);
  }
  bytes_written_ += bytes;
}

void AtomicFileWriter::commit() {
  SHARDTRAIN_CHECK(fd_ >= 0, "commit of {} twice", path_);
  const bool durable = durability_ == Durability::kDurable;
  if (durable && ::fsync(fd_) != 0) {
    fail("cannot fsync {} ({}); HINT: check free disk space and the filesystem", temp_path_,
         errno_text());
  }
  if (::close(fd_) != 0) {
    fd_ = -1;
    ::unlink(temp_path_.c_str());
    fail("cannot close {} ({}); HINT: check free disk space", temp_path_, errno_text());
  }
  fd_ = -1;
  try {
    require_replaceable(path_);  // again: it may have appeared while the file was written
  } catch (...) {
    ::unlink(temp_path_.c_str());
    throw;
  }
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    const std::string reason = errno_text();
    ::unlink(temp_path_.c_str());
    fail("cannot rename {} over {} ({}); HINT: check that {} is not a directory and is writable",
         temp_path_, path_, reason, path_);
  }
  if (durable) fsync_parent_dir(path_);
}

void write_file_atomically(const std::string& path, std::string_view contents,
                           Durability durability) {
  AtomicFileWriter writer(path, durability);
  writer.write(contents.data(), contents.size());
  writer.commit();
}

}  // namespace shardtrain
