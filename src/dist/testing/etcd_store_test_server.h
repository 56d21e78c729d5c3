// A real etcd server for tests (header-only; tests only): Debian's `etcd-server` binary,
// started on free loopback ports with a temporary data dir, stopped (and the dir removed) by
// stop(). Tests skip visibly when the binary is absent (scripts/setup.sh installs it);
// EtcdSuiteTest is the fixture that does so.
#pragma once

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include "core/error.h"
#include "dist/etcd_store.h"

namespace shardtrain::testing {

// A loopback TCP socket bound to a free port and listening (a port in use, for tests of what
// happens when another program holds it); closed by the destructor.
class LoopbackListener {
 public:
  LoopbackListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
        ::listen(fd_, 1) != 0) {
      return;
    }
    socklen_t length = sizeof(address);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
  }
  ~LoopbackListener() {
    if (fd_ >= 0) ::close(fd_);
  }
  LoopbackListener(const LoopbackListener&) = delete;
  LoopbackListener& operator=(const LoopbackListener&) = delete;
  // The port it listens on; 0 if binding or listening failed.
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// A loopback TCP port that was free a moment ago.
inline int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

// Where etcd is installed, or "" if it is not.
inline std::string find_etcd() {
  for (const char* path : {"/usr/bin/etcd", "/usr/local/bin/etcd"}) {
    if (::access(path, X_OK) == 0) return path;
  }
  return "";
}

class EtcdTestServer {
 public:
  // Starts etcd and waits (up to 15 s) until it answers. found() is false when etcd is not
  // installed; healthy() is false when it did not come up (see log()).
  void start() {
    const std::string etcd = find_etcd();
    if (etcd.empty()) return;
    char pattern[] = "/tmp/shardtrain_etcd_XXXXXX";
    data_dir_ = ::mkdtemp(pattern);
    port_ = free_loopback_port();
    const int peer_port = free_loopback_port();
    const std::string client_url = "http://127.0.0.1:" + std::to_string(port_);
    const std::string peer_url = "http://127.0.0.1:" + std::to_string(peer_port);
    pid_ = ::fork();
    if (pid_ == 0) {
      const std::string log_path = data_dir_ + "/etcd.log";
      std::freopen(log_path.c_str(), "w", stdout);
      std::freopen(log_path.c_str(), "a", stderr);
      ::execl(etcd.c_str(), etcd.c_str(), "--data-dir", (data_dir_ + "/data").c_str(),
              "--listen-client-urls", client_url.c_str(), "--advertise-client-urls",
              client_url.c_str(), "--listen-peer-urls", peer_url.c_str(),
              "--initial-advertise-peer-urls", peer_url.c_str(), "--initial-cluster",
              ("default=" + peer_url).c_str(), nullptr);
      ::_exit(127);
    }
    EtcdStore::Options quick;
    quick.request_timeout = std::chrono::milliseconds(200);
    EtcdStore probe("127.0.0.1", port_, "/probe/", quick);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    while (std::chrono::steady_clock::now() < deadline) {
      try {
        probe.try_get("x");
        healthy_ = true;
        return;
      } catch (const Error&) {
      }
    }
  }

  void stop() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
    if (!data_dir_.empty()) std::filesystem::remove_all(data_dir_);
    data_dir_.clear();
  }

  bool found() const { return pid_ > 0; }
  bool healthy() const { return healthy_; }
  int port() const { return port_; }
  std::string log() const { return data_dir_ + "/etcd.log"; }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  bool healthy_ = false;
  std::string data_dir_;
};

// A fixture with one etcd, `etcd_`, for the whole suite: each test skips visibly when etcd is
// not installed and fails when it did not come up. A fixture that overrides SetUp calls
// EtcdSuiteTest::SetUp() first and returns when that skipped or failed.
class EtcdSuiteTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { etcd_.start(); }
  static void TearDownTestSuite() { etcd_.stop(); }

  void SetUp() override {
    if (!etcd_.found()) GTEST_SKIP() << "etcd not found: install etcd-server (scripts/setup.sh)";
    ASSERT_TRUE(etcd_.healthy()) << "etcd did not become healthy; see " << etcd_.log();
  }
  bool skipped_or_failed() const { return IsSkipped() || HasFatalFailure(); }

  static inline EtcdTestServer etcd_;
};

}  // namespace shardtrain::testing
