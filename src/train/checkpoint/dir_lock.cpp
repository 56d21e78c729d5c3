#include "train/checkpoint/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <utility>

#include "core/error.h"
#include "core/log.h"

namespace shardtrain {
namespace fs = std::filesystem;

namespace {

std::string this_host() {
  char buffer[256] = {};
  ::gethostname(buffer, sizeof(buffer) - 1);
  return buffer;
}

struct Holder {
  std::string host;
  long pid = 0;
  std::string started;
  std::string what;
};

// The record in an open lock file; fields stay empty where it is absent or unreadable (a
// record is read defensively: at most 4 KiB, any JSON).
Holder read_holder(int fd) {
  char buffer[4096];
  const ssize_t got = ::pread(fd, buffer, sizeof(buffer), 0);
  Holder holder;
  if (got <= 0) return holder;
  const nlohmann::json record =
      nlohmann::json::parse(buffer, buffer + got, nullptr, /*allow_exceptions=*/false);
  if (!record.is_object()) return holder;
  const auto text = [&](const char* key) {
    const auto it = record.find(key);
    return it != record.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  holder.host = text("host");
  holder.started = text("started");
  holder.what = text("what");
  const auto pid = record.find("pid");
  if (pid != record.end() && pid->is_number_integer()) holder.pid = pid->get<long>();
  return holder;
}

std::string describe(const Holder& holder) {
  if (holder.host.empty() && holder.pid == 0) return "a run that left no record";
  std::string out = "host " + (holder.host.empty() ? std::string("?") : holder.host) + ", pid " +
                    std::to_string(holder.pid);
  if (!holder.started.empty()) out += ", since " + holder.started;
  return out;
}

bool pid_alive(long pid) {
  return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
}

std::string now_utc() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buffer;
}

// Whether fd is still the file at `path` (a releasing holder unlinks it; a lock on the unlinked
// inode would lock nothing).
bool still_linked(int fd, const std::string& path) {
  struct stat open_file {};
  struct stat on_disk {};
  return ::fstat(fd, &open_file) == 0 && ::stat(path.c_str(), &on_disk) == 0 &&
         open_file.st_ino == on_disk.st_ino && open_file.st_dev == on_disk.st_dev;
}

}  // namespace

DirLock::DirLock(const std::string& dir, const std::string& what) {
  std::error_code ec;
  const bool existed = fs::exists(dir, ec);
  fs::create_directories(dir, ec);
  if (!existed && !ec) created_dir_ = dir;
  if (ec) {
    fail("{} {}: cannot create it ({}); HINT: check the path and its permissions", what, dir,
         ec.message());
  }
  path_ = (fs::path(dir) / kDirLockFile).string();
  const std::string host = this_host();
  for (int attempt = 0; attempt < 16; ++attempt) {
    const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      fail("{} {}: cannot create the lock file {} ({}); HINT: check the dir's permissions", what,
           dir, path_, std::strerror(errno));
    }
    const Holder holder = read_holder(fd);
    bool locked = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
    const int lock_errno = errno;
    if (!locked && lock_errno != EWOULDBLOCK && lock_errno != EINTR) {
      // No flock here: the record decides (a dead pid on this host is stale).
      const bool stale = holder.pid == 0 || (holder.host == host && !pid_alive(holder.pid));
      const bool ours = holder.host == host && holder.pid == static_cast<long>(::getpid());
      locked = stale || ours;
      if (!locked) errno = EWOULDBLOCK;
    }
    if (!locked) {
      ::close(fd);
      fail(
          "{} {} is in use by another run ({}); HINT: wait for it or stop it, or use another "
          "dir; if no such run exists, remove {}",
          what, dir, describe(holder), path_);
    }
    if (!still_linked(fd, path_)) {  // the holder released (unlinked) it meanwhile: try again
      ::close(fd);
      continue;
    }
    if (holder.pid != 0 && !(holder.host == host && holder.pid == ::getpid())) {
      log::info("{} {}: took over the lock of a run that is gone ({})", what, dir,
                describe(holder));
    }
    const nlohmann::json record = {
        {"host", host}, {"pid", ::getpid()}, {"started", now_utc()}, {"what", what}};
    const std::string text = record.dump() + "\n";
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, text.data(), text.size(), 0) < 0) {
      const int error = errno;
      ::close(fd);
      fail("{} {}: cannot write the lock file {} ({}); HINT: check free space and permissions",
           what, dir, path_, std::strerror(error));
    }
    fd_ = fd;
    return;
  }
  release();
  fail("{} {}: the lock file {} keeps being replaced; HINT: another run is starting there", what,
       dir, path_);
}

DirLock::~DirLock() { release(); }

DirLock::DirLock(DirLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      path_(std::move(other.path_)),
      created_dir_(std::move(other.created_dir_)) {}

DirLock& DirLock::operator=(DirLock&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
    created_dir_ = std::move(other.created_dir_);
  }
  return *this;
}

void DirLock::release() {
  if (fd_ < 0) return;
  // Unlinked while still locked, so a waiting opener either sees the lock or no file.
  ::unlink(path_.c_str());
  ::close(fd_);
  fd_ = -1;
  std::error_code ec;
  if (!created_dir_.empty()) fs::remove(created_dir_, ec);  // only when empty
}

std::vector<DirLock> lock_run_dirs(const std::string& checkpoint_dir,
                                   const std::string& output_dir) {
  std::vector<DirLock> locks;
  if (!checkpoint_dir.empty()) locks.emplace_back(checkpoint_dir, "train.checkpoint_dir");
  std::error_code ec;
  const bool same = !checkpoint_dir.empty() && !output_dir.empty() &&
                    fs::equivalent(checkpoint_dir, output_dir, ec);
  if (!output_dir.empty() && !same) locks.emplace_back(output_dir, "train.output_dir");
  return locks;
}

}  // namespace shardtrain
