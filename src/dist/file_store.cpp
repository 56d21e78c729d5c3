#include "dist/file_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/error.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;
constexpr auto kPollInterval = std::chrono::milliseconds(2);
constexpr size_t kMaxKeyBytes = 120;  // hex-encoded, plus a prefix, under NAME_MAX

std::string hex_encode(const std::string& key) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(key.size() * 2);
  for (unsigned char c : key) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

std::optional<std::string> read_whole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Unique per process and call, so concurrent writers never share a temp file.
std::string temp_suffix() {
  static std::atomic<uint64_t> counter{0};
  return ".tmp-" + std::to_string(getpid()) + "-" + std::to_string(counter.fetch_add(1));
}

// Holds an exclusive flock on DIR/.lock for its lifetime.
class DirectoryLock {
 public:
  explicit DirectoryLock(const std::string& directory) {
    const std::string path = directory + "/.lock";
    fd_ = ::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("file store: cannot open {}: {}", path, std::strerror(errno));
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno != EINTR) fail("file store: cannot lock {}: {}", path, std::strerror(errno));
    }
  }
  ~DirectoryLock() {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace

FileStore::FileStore(std::string directory) : directory_(std::move(directory)) {
  std::error_code ec;
  fs::create_directories(directory_, ec);
  if (ec || !fs::is_directory(directory_)) {
    fail("file store: cannot create directory {}: {}; HINT: check SHARDTRAIN_STORE_DIR", directory_,
         ec.message());
  }
}

std::string FileStore::path_of(const std::string& key) const {
  if (key.size() > kMaxKeyBytes) {
    fail("file store: key '{}' is longer than {} bytes (file names are limited)", key,
         kMaxKeyBytes);
  }
  return directory_ + "/k" + hex_encode(key);
}

void FileStore::set(const std::string& key, const std::string& value) {
  const std::string path = path_of(key);
  const std::string temp = path + temp_suffix();
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out.write(value.data(), static_cast<std::streamsize>(value.size()));
    out.flush();
    if (!out) fail("file store: cannot write {} (key '{}'); HINT: is the disk full?", temp, key);
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    fail("file store: cannot rename {} to {}: {}", temp, path, std::strerror(errno));
  }
}

std::optional<std::string> FileStore::try_get(const std::string& key) {
  return read_whole(path_of(key));
}

std::string FileStore::get(const std::string& key, Duration timeout) {
  wait({key}, timeout);
  std::optional<std::string> value = try_get(key);
  if (!value) fail("file store: key '{}' in {} vanished while being read", key, directory_);
  return *value;
}

int64_t FileStore::add(const std::string& key, int64_t delta) {
  DirectoryLock lock(directory_);
  const std::optional<std::string> current = try_get(key);
  int64_t value = 0;
  if (current && !current->empty()) {
    try {
      value = std::stoll(*current);
    } catch (const std::exception&) {
      fail("file store: key '{}' in {} holds '{}', not an integer", key, directory_, *current);
    }
  }
  value += delta;
  set(key, std::to_string(value));
  return value;
}

std::string FileStore::compare_set(const std::string& key, const std::string& expected,
                                   const std::string& desired) {
  DirectoryLock lock(directory_);
  const std::optional<std::string> current = try_get(key);
  const bool matches = expected.empty() ? !current.has_value() : current == expected;
  if (!matches) return current.value_or("");
  set(key, desired);
  return desired;
}

void FileStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (const std::string& key : keys) {
    const std::string path = path_of(key);
    while (!fs::exists(path)) {
      if (std::chrono::steady_clock::now() >= deadline) {
        fail(
            "file store: timed out after {} ms waiting for key '{}' in {}; HINT: did every "
            "rank start, with the same SHARDTRAIN_STORE_DIR and WORLD_SIZE?",
            timeout.count(), key, directory_);
      }
      std::this_thread::sleep_for(kPollInterval);
    }
  }
}

bool FileStore::remove(const std::string& key) { return std::remove(path_of(key).c_str()) == 0; }

}  // namespace shardtrain
