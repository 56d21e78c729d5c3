// MappedFile: a read-only memory map of a whole file, so large checkpoints are paged in lazily
// and only the byte ranges a rank touches are ever read.
//
// open() throws Error naming the path when the file is missing, unreadable or a directory.
// An empty file maps to data() == nullptr, size() == 0. The mapping lives until destruction.
// Movable, not copyable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace shardtrain {

class MappedFile {
 public:
  MappedFile() = default;
  static MappedFile open(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void unmap() noexcept;

  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace shardtrain
