#include "dist/store_secret.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace shardtrain {

std::string generate_store_secret() {
  unsigned char bytes[32];
  size_t filled = 0;
  while (filled < sizeof(bytes)) {
    const ssize_t n = ::getrandom(bytes + filled, sizeof(bytes) - filled, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("cannot generate the store secret: getrandom: {}", std::strerror(errno));
    filled += static_cast<size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string secret;
  for (unsigned char b : bytes) {
    secret += kHex[b >> 4];
    secret += kHex[b & 15];
  }
  return secret;
}

std::string require_store_secret(const WorkerEnv& env) {
  if (env.store_secret.empty()) {
    fail(
        "environment variable {} is not set: the store at {}:{} admits only clients that "
        "present the run's secret; HINT: start workers with `shardtrain launch` (it sets the "
        "variable)",
        worker_env_names::kStoreSecret, env.rendezvous_host(), env.rendezvous_port());
  }
  check_store_secret(env.store_secret, worker_env_names::kStoreSecret);
  return env.store_secret;
}

void check_store_secret(const std::string& secret, const std::string& source) {
  const bool printable = secret.find_first_not_of(
                             "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                             "!#$%&()*+-./:;<>?@[]^_{|}~") == std::string::npos;
  if (secret.size() < 16 || secret.size() > 1024 || !printable) {
    fail(
        "{}: the store secret must be 16 to 1024 letters, digits or punctuation (no spaces, "
        "quotes, commas or '='), got {} characters; HINT: generate one with "
        "`openssl rand -hex 32`",
        source, secret.size());
  }
}

}  // namespace shardtrain
