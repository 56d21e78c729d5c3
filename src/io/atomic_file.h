// Atomic file replacement: a reader of `path` sees either the old file or the complete new one,
// never a partial write, even if the process dies mid-write.
//
// AtomicFileWriter writes into `path + ".tmp.<pid>"`; commit() flushes, fsyncs, renames the
// temp file over `path` and fsyncs the directory. With Durability::kVisibleOnly (a file other
// processes poll and that is rewritten often, e.g. a rank's metrics snapshot) it skips both
// fsyncs: readers still never see a partial file, but a machine crash may lose the last write.
// Destroying a writer without commit() removes the temp file and leaves any existing `path`
// untouched. A `path` that exists and is not a regular file (a directory, device, FIFO or socket,
// directly or through a link) is refused, at construction and again at commit: the rename would
// remove it. The temp file is created exclusively, never through a link. Every failure throws Error
// naming the path. Movable, not copyable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace shardtrain {

enum class Durability { kDurable, kVisibleOnly };

class AtomicFileWriter {
 public:
  // Creates (truncates) the temp file. REQUIRES: the parent directory exists.
  explicit AtomicFileWriter(std::string path, Durability durability = Durability::kDurable);
  ~AtomicFileWriter();
  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  // Appends `bytes` bytes. REQUIRES: not committed.
  void write(const void* data, size_t bytes);
  // Makes the new contents visible at path(). REQUIRES: not committed.
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }
  uint64_t bytes_written() const { return bytes_written_; }

 private:
  void discard() noexcept;

  std::string path_;
  std::string temp_path_;
  Durability durability_ = Durability::kDurable;
  int fd_ = -1;
  uint64_t bytes_written_ = 0;
};

// Replaces `path` with `contents` atomically.
void write_file_atomically(const std::string& path, std::string_view contents,
                           Durability durability = Durability::kDurable);

}  // namespace shardtrain
