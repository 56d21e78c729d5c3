// An exclusive lock on a file in the cache's .locks/ directory (flock, as huggingface_hub's
// filelock takes it on Linux), so one process per node downloads a blob or a model and the others
// wait, and a Python tool downloading the same blob at the same time takes turns with us. The
// kernel drops the lock when its holder dies, so a crashed downloader never blocks the next.
// A process that has to wait says so once on stderr (`waiting_note`). Not copyable.
#pragma once

#include <string>

namespace shardtrain {

class HubFileLock {
 public:
  // Creates the lock file (and its directory) when missing; blocks until the lock is held.
  // Throws Error naming the path when it cannot be created.
  HubFileLock(const std::string& path, const std::string& waiting_note);
  ~HubFileLock();
  HubFileLock(const HubFileLock&) = delete;
  HubFileLock& operator=(const HubFileLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace shardtrain
