// FuzzInputFile: a fuzz input as a file the loaders under test can open by path (they mmap or
// read files), without touching the disk: an anonymous memory file (memfd_create) opened
// through /proc/self/fd. One per fuzzer process, rewritten for every input.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace shardtrain::fuzz {

class FuzzInputFile {
 public:
  FuzzInputFile() : fd_(::memfd_create("shardtrain-fuzz-input", 0)) {
    if (fd_ < 0) std::abort();
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~FuzzInputFile() { ::close(fd_); }

  // Replaces the file's contents with `data` and returns its path.
  const std::string& write(const uint8_t* data, size_t size) {
    if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, data, size, 0) != static_cast<ssize_t>(size)) {
      std::abort();
    }
    return path_;
  }

 private:
  int fd_;
  std::string path_;
};

}  // namespace shardtrain::fuzz
