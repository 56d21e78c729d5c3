#include "io/hub/hub_download.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <memory>
#include <thread>

#include "core/error.h"
#include "io/file_lock.h"
#include "io/hub/hub_progress.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;

constexpr int kAttempts = 5;  // one download, its retries after dropped connections

class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new()) { reset(); }
  ~Sha256() { EVP_MD_CTX_free(ctx_); }
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void reset() { EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr); }
  void update(const void* data, size_t bytes) { EVP_DigestUpdate(ctx_, data, bytes); }
  std::string hex() {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    EVP_DigestFinal_ex(ctx_, digest, &length);
    std::string out;
    for (unsigned int i = 0; i < length; ++i) out += fmt::format("{:02x}", digest[i]);
    return out;
  }

 private:
  EVP_MD_CTX* ctx_;
};

// Hashes the first `bytes` bytes of the open file (the part an earlier attempt wrote).
bool hash_prefix(int fd, uint64_t bytes, Sha256& hash) {
  std::unique_ptr<char[]> buffer(new char[1 << 20]);
  uint64_t offset = 0;
  while (offset < bytes) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(1 << 20, bytes - offset));
    const ssize_t got = ::pread(fd, buffer.get(), want, static_cast<off_t>(offset));
    if (got <= 0) {
      if (got < 0 && errno == EINTR) continue;
      return false;
    }
    hash.update(buffer.get(), static_cast<size_t>(got));
    offset += static_cast<uint64_t>(got);
  }
  return true;
}

bool write_all(int fd, const char* data, size_t bytes) {
  while (bytes > 0) {
    const ssize_t n = ::write(fd, data, bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

[[noreturn]] void fail_write(const HubTarget& target, const std::string& path, int error,
                             uint64_t size) {
  fail(
      "{}: cannot write {} ({}); the part downloaded so far stays there and the next run "
      "resumes it; HINT: free space for {} or set HF_HUB_CACHE to a larger disk",
      target.context, path, std::strerror(error), format_bytes(size));
}

void check_free_space(const HubTarget& target, const std::string& dir, uint64_t needed) {
  struct statvfs fs_info {};
  if (::statvfs(dir.c_str(), &fs_info) != 0) return;  // unknown: the writes will tell
  const uint64_t free_bytes = static_cast<uint64_t>(fs_info.f_bavail) * fs_info.f_frsize;
  if (free_bytes < needed) {
    fail(
        "{}: {} needs {} more in {}, but only {} are free; HINT: free space or set "
        "HF_HUB_CACHE to a larger disk",
        target.context, target.repo_id, format_bytes(needed), dir, format_bytes(free_bytes));
  }
}

// One GET of the rest of the blob, appended to `fd`. Returns true when the transfer ended
// without a transport error; `done` is updated to the bytes now in the file.
struct Attempt {
  bool transport_ok = false;
  bool retryable = false;  // a dropped or stalled connection, or a 5xx: try again
  bool oversize = false;   // more bytes than announced
  int write_errno = 0;     // the cache could not be written
  std::string error;
};

Attempt fetch_rest(const HubTarget& target, const HubBlob& blob, int fd, uint64_t& done,
                   Sha256& hash, HubProgress& progress) {
  HttpRequest request;
  request.url = blob.url;
  request.headers = hub_headers(*target.settings, blob.url);
  request.follow_redirects = true;
  request.range_start = done;
  request.low_speed_seconds = 60;
  Attempt attempt;
  int& write_errno = attempt.write_errno;
  bool& oversize = attempt.oversize;
  bool first_chunk = true;
  request.body_sink = [&](int status, const char* data, size_t bytes) {
    if (first_chunk && status == 200 && done > 0) {  // the server ignored the range: start over
      if (::ftruncate(fd, 0) != 0) {
        write_errno = errno;
        return false;
      }
      done = 0;
      hash.reset();
    }
    first_chunk = false;
    if (done + bytes > blob.size) {
      oversize = true;
      return false;
    }
    if (!write_all(fd, data, bytes)) {
      write_errno = errno;
      return false;
    }
    hash.update(data, bytes);
    done += bytes;
    progress.advance(bytes);
    return true;
  };
  std::string error;
  HttpFailure failure = HttpFailure::kNone;
  const std::optional<HttpResponse> response = http_request(request, error, &failure);
  if (write_errno != 0 || oversize) return attempt;
  if (!response) {
    attempt.error = error;
    attempt.retryable = failure == HttpFailure::kCutOff || failure == HttpFailure::kTimeout ||
                        failure == HttpFailure::kConnect || failure == HttpFailure::kOther;
    return attempt;
  }
  if (response->status == 416 && done == blob.size) {  // already complete
    attempt.transport_ok = true;
    return attempt;
  }
  if (response->status >= 500 || response->status == 429) {
    attempt.error = fmt::format("HTTP {}", response->status);
    attempt.retryable = true;
    return attempt;
  }
  if (response->status >= 400) fail_hub_response(target, blob.url, &*response, "");
  attempt.transport_ok = true;
  return attempt;
}

}  // namespace

std::string file_sha256(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot read {} ({})", path, std::strerror(errno));
  Sha256 hash;
  struct stat info {};
  const bool ok =
      ::fstat(fd, &info) == 0 && hash_prefix(fd, static_cast<uint64_t>(info.st_size), hash);
  ::close(fd);
  if (!ok) fail("cannot read {} ({})", path, std::strerror(errno));
  return hash.hex();
}

void download_blob(const HubTarget& target, const HubCacheRepo& repo, const HubBlob& blob) {
  // Under a file size limit (ulimit -f) a write past it fails with EFBIG instead of the signal
  // killing the process, so the limit is reported like a full disk.
  std::signal(SIGXFSZ, SIG_IGN);
  const std::string blob_path = repo.blob_path(blob.etag);
  const std::string incomplete = blob_path + ".incomplete";
  std::error_code ec;
  fs::create_directories(fs::path(blob_path).parent_path(), ec);
  const FileLock lock((fs::path(repo.locks_dir()) / (blob.etag + ".lock")).string(), kHubLockHint,
                      "hub: another process is downloading " + blob.file + "; waiting");
  if (fs::exists(blob_path, ec)) return;  // it finished while we waited

  const int fd = ::open(incomplete.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) fail_write(target, incomplete, errno, blob.size);
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat info {};
  uint64_t done = ::fstat(fd, &info) == 0 ? static_cast<uint64_t>(info.st_size) : 0;
  Sha256 hash;
  if (done > blob.size || !hash_prefix(fd, done, hash)) {  // not a prefix of this blob: restart
    if (::ftruncate(fd, 0) != 0) fail_write(target, incomplete, errno, blob.size);
    done = 0;
    hash.reset();
  }
  if (::lseek(fd, 0, SEEK_END) < 0) fail_write(target, incomplete, errno, blob.size);
  check_free_space(target, fs::path(blob_path).parent_path().string(), blob.size - done);

  HubProgress progress(target.repo_id + " " + blob.file, blob.size, done);
  std::string last_error;
  for (int attempt = 0; done < blob.size; ++attempt) {
    if (attempt == kAttempts) {
      fail(
          "{}: the download of {} failed {} times ({}); the {} received are kept in {} and "
          "the next run resumes there; HINT: check the network, then run again",
          target.context, blob.file, kAttempts, last_error, format_bytes(done), incomplete);
    }
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(250 << attempt));
    const Attempt result = fetch_rest(target, blob, fd, done, hash, progress);
    if (result.write_errno != 0) fail_write(target, incomplete, result.write_errno, blob.size);
    if (result.oversize) {
      fs::remove(incomplete, ec);
      fail(
          "{}: the server sent more than the {} bytes the Hub announced for {}; the download "
          "was removed and not used; HINT: if it repeats, the server at HF_ENDPOINT serves "
          "another file",
          target.context, blob.size, blob.file);
    }
    if (result.transport_ok && done < blob.size) {
      last_error = fmt::format("the transfer ended at {} of {} bytes", done, blob.size);
    } else if (!result.transport_ok) {
      last_error = result.error;
      if (!result.retryable) {
        fail(
            "{}: cannot download {} from {} ({}); the {} received are kept in {} for the next "
            "run",
            target.context, blob.file, blob.url, result.error, format_bytes(done), incomplete);
      }
    }
  }
  if (!blob.sha256.empty()) {
    const std::string actual = hash.hex();
    if (actual != blob.sha256) {
      fs::remove(incomplete, ec);
      fail(
          "{}: the download of {} is corrupt (sha256 {}, the Hub says {}); it was removed and "
          "not used; HINT: run again; if it repeats, the server at HF_ENDPOINT serves a bad file",
          target.context, blob.file, actual, blob.sha256);
    }
  }
  if (::fsync(fd) != 0) fail_write(target, incomplete, errno, blob.size);
  progress.finish();
  fs::rename(incomplete, blob_path, ec);
  if (ec)
    fail("{}: cannot rename {} to {} ({})", target.context, incomplete, blob_path, ec.message());
}

}  // namespace shardtrain
