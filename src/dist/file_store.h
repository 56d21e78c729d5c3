// FileStore: a Store over a directory that every participant can see (a local temp dir for
// tests, or a shared filesystem for rendezvous without a server).
//
// One file per key (the key hex-encoded into the file name, so any byte string of up to 120
// bytes is a valid key).
// set() writes a temp file and rename()s it over the key's file, so readers never see a partial
// value. add() and compare_set() take an exclusive flock() on DIR/.lock around their
// read-modify-write. Waits poll the directory (a few milliseconds apart) until the keys exist
// or the timeout expires; the timeout error names the key and the directory.
//
// The directory is created if missing. Files are never cleaned up automatically: scope keys by
// run (PrefixStore) or use a fresh directory per run.
#pragma once

#include <string>

#include "dist/store.h"

namespace shardtrain {

class FileStore final : public Store {
 public:
  // Throws Error if `directory` cannot be created.
  explicit FileStore(std::string directory);

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, Duration timeout) override;
  std::optional<std::string> try_get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override;
  void wait(const std::vector<std::string>& keys, Duration timeout) override;
  bool remove(const std::string& key) override;
  std::string endpoint() const override { return "file store " + directory_; }

 private:
  std::string path_of(const std::string& key) const;

  std::string directory_;
};

}  // namespace shardtrain
