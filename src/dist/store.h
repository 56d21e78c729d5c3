// Store: the key-value service ranks and launcher agents use to find each other (rendezvous,
// NCCL unique ids, Gloo bootstrap, heartbeats). Implementations: the embedded TCP store
// (dist/tcp_store.h, the default, hosted by the node-0 launcher) and etcd v3 (dist/etcd_store.h).
//
// Every blocking call takes a timeout; on expiry it throws shardtrain::Error naming the key,
// the endpoint and what to check. Values are byte strings. Keys are plain strings; callers
// scope them (e.g. "run/<id>/gen/<n>/...") with PrefixStore.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace shardtrain {

class Store {
 public:
  using Duration = std::chrono::milliseconds;
  virtual ~Store() = default;

  virtual void set(const std::string& key, const std::string& value) = 0;
  // Waits until `key` exists (up to `timeout`), then returns its value.
  virtual std::string get(const std::string& key, Duration timeout) = 0;
  // Returns the value if present, without waiting.
  virtual std::optional<std::string> try_get(const std::string& key) = 0;
  // Atomically adds `delta` to the integer stored at `key` (missing = 0); returns the result.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Atomically sets `key` to `desired` if its current value equals `expected` (an empty
  // `expected` means "key absent"). Returns the value after the operation.
  virtual std::string compare_set(const std::string& key, const std::string& expected,
                                  const std::string& desired) = 0;
  // Waits until all `keys` exist.
  virtual void wait(const std::vector<std::string>& keys, Duration timeout) = 0;
  // Removes `key`; returns whether it existed.
  virtual bool remove(const std::string& key) = 0;
  // "host:port" or similar, for error messages.
  virtual std::string endpoint() const = 0;
};

// Prepends `prefix` to every key of another store (which must outlive it).
class PrefixStore final : public Store {
 public:
  PrefixStore(Store& inner, std::string prefix) : inner_(inner), prefix_(std::move(prefix)) {}
  void set(const std::string& key, const std::string& value) override {
    inner_.set(prefix_ + key, value);
  }
  std::string get(const std::string& key, Duration timeout) override {
    return inner_.get(prefix_ + key, timeout);
  }
  std::optional<std::string> try_get(const std::string& key) override {
    return inner_.try_get(prefix_ + key);
  }
  int64_t add(const std::string& key, int64_t delta) override {
    return inner_.add(prefix_ + key, delta);
  }
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override {
    return inner_.compare_set(prefix_ + key, expected, desired);
  }
  void wait(const std::vector<std::string>& keys, Duration timeout) override {
    std::vector<std::string> prefixed;
    for (const auto& k : keys) prefixed.push_back(prefix_ + k);
    inner_.wait(prefixed, timeout);
  }
  bool remove(const std::string& key) override { return inner_.remove(prefix_ + key); }
  std::string endpoint() const override { return inner_.endpoint(); }

 private:
  Store& inner_;
  std::string prefix_;
};

}  // namespace shardtrain
