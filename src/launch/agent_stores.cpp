#include "launch/agent_stores.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "dist/bind_address.h"
#include "dist/etcd_store.h"
#include "dist/host_name.h"
#include "dist/store_keys.h"
#include "dist/store_secret.h"

namespace shardtrain::launch {
namespace {

using Clock = std::chrono::steady_clock;

// The address other nodes are told to reach this one by: what this host's name resolves to here,
// as a numeric address. Under JobSet and Kubeflow Trainer a pod's short host name resolves only
// in its own /etc/hosts (others know it as host.subdomain), so a name would not reach it; the
// address does. The name itself when it resolves to nothing but loopback (127.0.1.1 in a
// Debian /etc/hosts) or not at all: peers may still know it by DNS.
std::string advertised_host() {
  const std::string name = host_name();
  const std::string address = resolve_host(name).routable;
  return address.empty() ? name : address;
}

bool same_address(const sockaddr* a, const sockaddr* b) {
  if (a->sa_family != b->sa_family) return false;
  if (a->sa_family == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in*>(b)->sin_addr.s_addr;
  }
  if (a->sa_family == AF_INET6) {
    return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr,
                       &reinterpret_cast<const sockaddr_in6*>(b)->sin6_addr, sizeof(in6_addr)) == 0;
  }
  return false;
}

// Whether `host` names this machine: a loopback name, this host's name, or an address of one
// of its interfaces (as torchrun decides which agent hosts the c10d store).
bool names_this_machine(const std::string& host) {
  if (is_loopback_host(host) || host == host_name()) return true;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return false;
  ifaddrs* interfaces = nullptr;
  bool local = false;
  if (::getifaddrs(&interfaces) == 0) {
    for (const addrinfo* a = found; a != nullptr && !local; a = a->ai_next) {
      for (const ifaddrs* i = interfaces; i != nullptr && !local; i = i->ifa_next) {
        local = i->ifa_addr != nullptr && same_address(a->ai_addr, i->ifa_addr);
      }
    }
    ::freeifaddrs(interfaces);
  }
  ::freeaddrinfo(found);
  return local;
}


// "host:port" or "[v6]:port"; nullopt when malformed.
std::optional<AgentStores::Endpoint> parse_endpoint(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) return std::nullopt;
  std::string host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  int port = 0;
  const std::string digits = text.substr(colon + 1);
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), port);
  if (ec != std::errc() || end != digits.data() + digits.size() || port < 1 || port > 65535) {
    return std::nullopt;
  }
  return AgentStores::Endpoint{host, port};
}

// A TCP port free on `bind_host` ("" = every interface) right now. As torchrun's, racy by
// nature: the worker that binds it comes later; a fresh port per generation keeps the window
// small.
int free_tcp_port(const std::string& bind_host) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fail("cannot create a socket to find a free port: {}", std::strerror(errno));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = bind_host.empty() ? htonl(INADDR_ANY) : htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  const int error = errno;
  ::close(fd);
  if (!ok) fail("cannot find a free TCP port for MASTER_PORT: {}", std::strerror(error));
  return ntohs(address.sin_port);
}

}  // namespace

AgentStores::AgentStores(const LaunchConfig& config, const std::string& run_id)
    : config_(config), run_id_(run_id) {
  if (config.rdzv_backend == "etcd") {
    start_etcd(config, run_id);
  } else {
    start_tcp(config, run_id);
  }
}

void AgentStores::start_tcp(const LaunchConfig& config, const std::string& run_id) {
  worker_endpoint_ = {config.rdzv_host, config.rdzv_port};
  const bool must_host = config.node_rank_given && config.node_rank == 0;
  const bool may_host = !config.node_rank_given && names_this_machine(config.rdzv_host);
  store_secret_ = config.store_secret;  // resolve_launch_config: given, or generated (one node)
  if (must_host || may_host) {
    // Bind the address the endpoint resolves to, and only that: other nodes reach the store
    // there, and nothing else on this machine's other interfaces can.
    const std::string bind_host = bind_address_for(config.rdzv_host);
    try {
      rendezvous_server_ =
          std::make_unique<TcpStoreServer>(bind_host, config.rdzv_port, store_secret_);
      worker_endpoint_.port = rendezvous_server_->port();
    } catch (const Error& e) {
      if (must_host) throw;
      log::info("launch: not hosting the store ({}); joining the agent that does", e.what());
    }
  }
  const auto connect = [&] {
    return std::make_unique<TcpStoreClient>(worker_endpoint_.host, worker_endpoint_.port,
                                            config.join_timeout, store_secret_);
  };
  const std::string scope = store_keys::tcp_rendezvous_scope(run_id);
  backend_ = connect();
  rendezvous_ = std::make_unique<PrefixStore>(*backend_, scope);
  liveness_backend_ = connect();
  liveness_publisher_ = std::make_unique<PrefixStore>(*liveness_backend_, scope);
  liveness_mode_ = AgentLiveness::Mode::kHeartbeat;
}

void AgentStores::start_etcd(const LaunchConfig& config, const std::string& run_id) {
  EtcdStore::Options options;
  options.request_timeout = config.join_timeout;
  const double ttl = std::chrono::duration<double>(config.keep_alive_interval).count() *
                     config.keep_alive_max_attempt;
  options.lease_ttl_seconds = std::max(1, static_cast<int>(std::ceil(ttl)));
  options.leased_keys = [](const std::string& key) {
    return key.rfind(store_keys::kAlivePrefix, 0) == 0;
  };
  options.tls = config.etcd_tls;
  options.user = config.etcd_user;
  options.password = config.etcd_password;
  backend_ =
      std::make_unique<EtcdStore>(config.rdzv_host, config.rdzv_port,
                                  store_keys::etcd_rendezvous_scope(run_id), std::move(options));
  rendezvous_ = std::make_unique<PrefixStore>(*backend_, "");
  liveness_publisher_ = std::make_unique<PrefixStore>(*backend_, "");
  liveness_mode_ = AgentLiveness::Mode::kLease;
  // The workers' TCP stores need a secret: the one given, or one the first agent generates and
  // all share through etcd (which its own TLS and auth protect).
  store_secret_ = config.store_secret;
  if (store_secret_.empty()) {
    store_secret_ = rendezvous_->compare_set(store_keys::kStoreSecret, "", generate_store_secret());
    check_store_secret(store_secret_,
                       backend_->endpoint() + " key '" + store_keys::kStoreSecret + "'");
  }
}

AgentStores::WorkerEndpoints AgentStores::pick_worker_endpoints() {
  const bool loopback = is_loopback_host(config_.rdzv_host);
  const std::string advertised = loopback ? "127.0.0.1" : advertised_host();
  if (config_.rdzv_backend == "etcd" && !worker_server_) {
    // Bound to the address other nodes reach this one by (its host name's) alone.
    worker_server_ =
        std::make_unique<TcpStoreServer>(bind_address_for(advertised), 0, store_secret_);
    worker_endpoint_ = {advertised, worker_server_->port()};
  }
  return WorkerEndpoints{worker_endpoint_,
                         Endpoint{advertised, free_tcp_port(loopback ? "127.0.0.1" : "")},
                         store_secret_};
}

std::optional<AgentStores::WorkerEndpoints> AgentStores::worker_endpoints(
    const Generation& g, const std::function<bool()>& give_up) {
  const std::string key = g.prefix() + "worker_endpoints";
  if (g.group_rank == 0) {
    const WorkerEndpoints picked = pick_worker_endpoints();
    rendezvous_->set(key,
                     tcp_store_wire::format_endpoint(picked.store.host, picked.store.port) + " " +
                         tcp_store_wire::format_endpoint(picked.master.host, picked.master.port));
    return picked;
  }
  const auto deadline = Clock::now() + config_.join_timeout;
  while (true) {
    if (const std::optional<std::string> published = rendezvous_->try_get(key)) {
      const auto space = published->find(' ');
      const std::optional<Endpoint> store = parse_endpoint(published->substr(0, space));
      const std::optional<Endpoint> master =
          space == std::string::npos ? std::nullopt : parse_endpoint(published->substr(space + 1));
      if (!store || !master) {
        fail(
            "{}: key '{}' holds '{}', not two HOST:PORT endpoints; HINT: another program uses "
            "this run id: pick another --rdzv-id",
            backend_->endpoint(), key, published->substr(0, 80));
      }
      return WorkerEndpoints{*store, *master, store_secret_};
    }
    if (give_up()) return std::nullopt;
    if (Clock::now() >= deadline) {
      fail(
          "{}: node 0 of generation {} ({}) did not publish the workers' endpoints (key '{}') "
          "within {} s; HINT: is its launcher running?",
          backend_->endpoint(), g.number, g.members[0].host, key,
          config_.join_timeout.count() / 1000);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace shardtrain::launch
