// EtcdStore against a real etcd (Debian etcd-server) that serves only TLS, requires client
// certificates (--client-cert-auth) and has user/password authentication enabled, as a secured
// production etcd does. The test makes its own CA, server and client certificates with the
// openssl command line and removes them (and etcd's data) afterwards. Skips visibly without
// etcd or openssl.
//
// Checked: the store works with cacert + cert + key + user/password, also through
// `shardtrain launch --rdzv-backend etcd --rdzv-conf ...`; and each missing or wrong piece (no
// client certificate, another CA, plain HTTP, a wrong password, no user at all) is refused with
// an Error saying what failed.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "core/error.h"
#include "core/testing/test_support.h"
#include "dist/etcd_http.h"
#include "dist/etcd_store.h"
#include "dist/testing/etcd_store_test_server.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

using testing::error_of;

bool sh(const std::string& command) {
  return std::system((command + " >/dev/null 2>&1").c_str()) == 0;
}

class EtcdTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (testing::find_etcd().empty() || !sh("command -v openssl")) {
      GTEST_SKIP() << "etcd-server or openssl is not installed (scripts/setup.sh installs both)";
    }
    char pattern[] = "/tmp/shardtrain_etcd_tls_XXXXXX";
    dir_ = ::mkdtemp(pattern);
    ASSERT_TRUE(make_certificates()) << "openssl could not make the test certificates";
    start_etcd();
    ASSERT_TRUE(wait_healthy()) << "etcd did not come up; see " << file("etcd.log");
    enable_auth();
  }
  void TearDown() override {
    if (HasFailure() && !dir_.empty()) {
      std::system(("tail -20 " + file("etcd.log")).c_str());  // why etcd refused, for the log
    }
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  std::string file(const std::string& name) const { return dir_ + "/" + name; }

  // A CA, a server certificate for 127.0.0.1 and a client certificate (no CommonName, so no
  // etcd user either), all P-256 keys (fast to make).
  bool make_certificates() const {
    const std::string ec = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    const auto sign = [&](const std::string& name, const std::string& subject,
                          const std::string& ext) {
      return sh("cd " + dir_ + " && openssl req" + ec + " -keyout " + name + ".key -out " + name +
                ".csr -subj " + subject + " && printf '" + ext + "' > " + name +
                ".ext && openssl x509 -req -in " + name + ".csr -CA ca.pem -CAkey ca.key " +
                "-CAcreateserial -days 1 -out " + name + ".pem -extfile " + name + ".ext");
    };
    return sh("cd " + dir_ + " && openssl req -x509" + ec +
              " -keyout ca.key -out ca.pem -days 1 -subj /CN=shardtrain-test-ca") &&
           sh("cd " + dir_ + " && openssl req -x509" + ec +
              " -keyout other_ca.key -out other_ca.pem -days 1 -subj /CN=another-ca") &&
           // etcd's JSON gateway dials etcd itself with the server certificate (clientAuth), and
           // refuses client certificates with a CommonName (CVE-2018-16886): as in production.
           sign("server", "/CN=server",
                "subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth,clientAuth\\n") &&
           sign("client", "/O=shardtrain-test-client", "extendedKeyUsage=clientAuth\\n");
  }

  void start_etcd() {
    port_ = testing::free_loopback_port();
    const std::string client_url = "https://127.0.0.1:" + std::to_string(port_);
    const std::string peer_url =
        "http://127.0.0.1:" + std::to_string(testing::free_loopback_port());
    const std::string etcd = testing::find_etcd();
    pid_ = ::fork();
    if (pid_ == 0) {
      std::freopen(file("etcd.log").c_str(), "w", stdout);
      std::freopen(file("etcd.log").c_str(), "a", stderr);
      ::execl(etcd.c_str(), etcd.c_str(), "--data-dir", file("data").c_str(),
              "--listen-client-urls", client_url.c_str(), "--advertise-client-urls",
              client_url.c_str(), "--listen-peer-urls", peer_url.c_str(),
              "--initial-advertise-peer-urls", peer_url.c_str(), "--initial-cluster",
              ("default=" + peer_url).c_str(), "--cert-file", file("server.pem").c_str(),
              "--key-file", file("server.key").c_str(), "--trusted-ca-file", file("ca.pem").c_str(),
              "--client-cert-auth", nullptr);
      ::_exit(127);
    }
  }

  EtcdTlsFiles client_tls() const {
    return {file("ca.pem"), file("client.pem"), file("client.key")};
  }

  // One raw request to etcd over TLS with the client certificate; the reply body, or "" on failure.
  std::string request(const std::string& path, const nlohmann::json& body,
                      const std::string& headers = "") const {
    const EtcdTls tls(client_tls());
    std::string error;
    const auto response =
        http_post("127.0.0.1", port_, path, headers, body.dump(), &tls, Clock::now() + 5s, error);
    return response && response->status == 200 ? response->body : "";
  }

  bool wait_healthy() const {
    const auto deadline = Clock::now() + 20s;
    while (Clock::now() < deadline) {
      if (!request("/v3/kv/range", {{"key", "eA=="}}).empty()) return true;
      std::this_thread::sleep_for(100ms);
    }
    return false;
  }

  void enable_auth() const {
    ASSERT_FALSE(request("/v3/auth/user/add", {{"name", "root"}, {"password", "root-pw"}}).empty());
    ASSERT_FALSE(request("/v3/auth/role/add", {{"name", "root"}}).empty());
    ASSERT_FALSE(request("/v3/auth/user/grant", {{"user", "root"}, {"role", "root"}}).empty());
    ASSERT_FALSE(request("/v3/auth/enable", nlohmann::json::object()).empty());
  }

  EtcdStore::Options options(const EtcdTlsFiles& tls, const std::string& user,
                             const std::string& password) const {
    EtcdStore::Options o;
    o.request_timeout = 3000ms;
    o.tls = tls;
    o.user = user;
    o.password = password;
    return o;
  }

  std::string dir_;
  pid_t pid_ = -1;
  int port_ = 0;
};

TEST_F(EtcdTlsTest, StoreWorksWithClientCertificateAndPassword) {
  EtcdStore::Options leased = options(client_tls(), "root", "root-pw");
  leased.lease_ttl_seconds = 5;
  leased.leased_keys = [](const std::string& key) { return key == "alive"; };
  EtcdStore store("127.0.0.1", port_, "/tls-test/", leased);
  store.set("k", "v");
  EXPECT_EQ(store.get("k", 1000ms), "v");
  EXPECT_EQ(store.add("n", 5), 5);
  EXPECT_EQ(store.compare_set("c", "", "first"), "first");
  store.set("alive", "yes");  // carries the lease
  EXPECT_EQ(store.try_get("alive"), "yes");
  EXPECT_TRUE(store.remove("k"));
  EXPECT_EQ(store.try_get("k"), std::nullopt);
}

TEST_F(EtcdTlsTest, EachMissingOrWrongPieceIsRefused) {
  const std::string wrong_password = error_of(
      [&] { EtcdStore("127.0.0.1", port_, "/t/", options(client_tls(), "root", "guess")); });
  EXPECT_NE(wrong_password.find("user 'root' was not authenticated"), std::string::npos)
      << wrong_password;

  // Auth is on: without a user (and a certificate without CommonName) the request has no user.
  EtcdStore anonymous("127.0.0.1", port_, "/t/", options(client_tls(), "", ""));
  EXPECT_NE(error_of([&] { anonymous.set("k", "v"); }).find("HTTP"), std::string::npos);

  const std::string no_client_cert = error_of([&] {
    EtcdStore s("127.0.0.1", port_, "/t/", options({file("ca.pem"), "", ""}, "root", "root-pw"));
  });
  EXPECT_NE(no_client_cert.find("TLS"), std::string::npos) << no_client_cert;

  const std::string other_ca = error_of([&] {
    EtcdStore s(
        "127.0.0.1", port_, "/t/",
        options({file("other_ca.pem"), file("client.pem"), file("client.key")}, "root", "root-pw"));
  });
  EXPECT_NE(other_ca.find("certificate was not accepted"), std::string::npos) << other_ca;

  const std::string plain_http =
      error_of([&] { EtcdStore s("127.0.0.1", port_, "/t/", options({}, "root", "root-pw")); });
  EXPECT_NE(plain_http.find("authenticate user 'root'"), std::string::npos) << plain_http;

  const std::string mismatched_key = error_of([&] {
    EtcdStore s(
        "127.0.0.1", port_, "/t/",
        options({file("ca.pem"), file("client.pem"), file("server.key")}, "root", "root-pw"));
  });
  EXPECT_NE(mismatched_key.find("--rdzv-conf key="), std::string::npos) << mismatched_key;
}

TEST_F(EtcdTlsTest, LaunchPassesTheRdzvConfKeysToEtcd) {
  const std::string conf = "cacert=" + file("ca.pem") + ",cert=" + file("client.pem") +
                           ",key=" + file("client.key") + ",user=root,password=root-pw";
  const testing::CommandResult r = testing::run_command(
      "timeout -s KILL 60 " + std::string(SHARDTRAIN_BINARY) +
      " launch --rdzv-backend etcd --rdzv-endpoint 127.0.0.1:" + std::to_string(port_) +
      " --nproc-per-node 2 --rdzv-conf " + conf +
      " -- /bin/sh -c 'echo rank $RANK secret ${#SHARDTRAIN_STORE_SECRET}'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1 secret 64"), std::string::npos) << r.output;
  const testing::CommandResult refused = testing::run_command(
      "timeout -s KILL 60 " + std::string(SHARDTRAIN_BINARY) +
      " launch --rdzv-backend etcd --rdzv-endpoint 127.0.0.1:" + std::to_string(port_) +
      " --rdzv-conf join_timeout=3,cacert=" + file("ca.pem") + ",cert=" + file("client.pem") +
      ",key=" + file("client.key") + ",user=root,password=nope -- /bin/sh -c true");
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("was not authenticated"), std::string::npos) << refused.output;
}

}  // namespace
}  // namespace shardtrain
