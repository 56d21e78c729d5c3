// DirLock: one run at a time per checkpoint dir and per output dir.
//
// Two runs writing one checkpoint dir (or one Hugging Face output dir) interleave their files
// and fail late and misleadingly ("a rank's write was lost"). A run takes DIR/.shardtrain.lock
// up front (world rank 0, before any checkpoint is read or written) and holds it until it ends;
// a second run is refused in one line naming the dir and the holder's host, pid and start time.
//
// The lock is a kernel file lock (flock) on that file, so a holder that dies, however it dies,
// releases it: a lock file left behind by a killed run is stale and simply taken over (its
// record is replaced). Where the file system has no flock (ENOLCK, some network file systems),
// the record decides: a live pid on this host, or any other host, holds it; a dead pid on this
// host is stale. The record (one JSON line: host, pid, started, what) is informational.
// Movable, not copyable; the destructor releases the lock and removes the file (and the dir,
// when the lock created it and it is still empty).
#pragma once

#include <string>
#include <vector>

namespace shardtrain {

inline constexpr const char* kDirLockFile = ".shardtrain.lock";

class DirLock {
 public:
  DirLock() = default;  // holds nothing
  // Creates `dir` when absent and locks it. `what` names the setting in errors
  // ("train.checkpoint_dir", "export --out"). Throws Error when another live run holds it or the
  // lock file cannot be created.
  DirLock(const std::string& dir, const std::string& what);
  ~DirLock();
  DirLock(DirLock&& other) noexcept;
  DirLock& operator=(DirLock&& other) noexcept;
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

  bool held() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }

 private:
  void release();
  int fd_ = -1;
  std::string path_;
  std::string created_dir_;  // removed again on release when empty
};

// The locks of one training run: its checkpoint dir and its output dir (either may be empty;
// one lock when both name the same dir).
std::vector<DirLock> lock_run_dirs(const std::string& checkpoint_dir,
                                   const std::string& output_dir);

}  // namespace shardtrain
