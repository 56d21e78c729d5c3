// FileLock: an exclusive lock (flock) on a lock file, held for the object's lifetime. Used where
// processes of one node take turns: one prepares a data cache entry or downloads a Hub blob
// while the others wait and then find it done (huggingface_hub's filelock takes the same kind of
// lock on Linux, so a Python tool and we take turns too). The kernel drops the lock when its
// holder dies, so a crashed holder never blocks the next. Not copyable.
#pragma once

#include <string>

namespace shardtrain {

class FileLock {
 public:
  // Creates the lock file (and its directory) when missing and blocks until the lock is held; a
  // process that has to wait prints `waiting_note` once on stderr (none when empty). Throws Error
  // naming the path, with `hint` (what to make writable), when the file cannot be created.
  FileLock(const std::string& path, const std::string& hint, const std::string& waiting_note = "");
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace shardtrain
