#include "io/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace shardtrain {

FileLock::FileLock(const std::string& path, const std::string& hint,
                   const std::string& waiting_note) {
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0664);
  if (fd_ < 0)
    fail("cannot create the lock file {} ({}); HINT: {}", path, std::strerror(errno), hint);
  if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
  if (!waiting_note.empty())
    std::fprintf(stderr, "%s (lock %s)\n", waiting_note.c_str(), path.c_str());
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno != EINTR) {
      const int saved = errno;
      ::close(fd_);
      fail("cannot lock {} ({})", path, std::strerror(saved));
    }
  }
}

FileLock::~FileLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

}  // namespace shardtrain
