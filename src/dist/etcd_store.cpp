#include "dist/etcd_store.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"
#include "dist/etcd_http.h"
#include "dist/tcp_store_wire.h"

namespace shardtrain {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;
using namespace std::chrono_literals;

constexpr char kBase64Alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64_encode(const std::string& bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t n =
        (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) | uint8_t(bytes[i + 2]);
    for (int shift : {18, 12, 6, 0}) out += kBase64Alphabet[(n >> shift) & 63];
  }
  if (const size_t rest = bytes.size() - i; rest > 0) {
    uint32_t n = uint8_t(bytes[i]) << 16;
    if (rest == 2) n |= uint8_t(bytes[i + 1]) << 8;
    out += kBase64Alphabet[(n >> 18) & 63];
    out += kBase64Alphabet[(n >> 12) & 63];
    out += rest == 2 ? kBase64Alphabet[(n >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string base64_decode(const std::string& text) {
  std::string out;
  uint32_t bits = 0;
  int count = 0;
  for (const char c : text) {
    const char* at = std::strchr(kBase64Alphabet, c);
    if (c == '=' || c == '\0' || at == nullptr) continue;
    bits = (bits << 6) | uint32_t(at - kBase64Alphabet);
    count += 6;
    if (count >= 8) {
      count -= 8;
      out += char((bits >> count) & 0xFF);
    }
  }
  return out;
}

// etcd's JSON encodes int64 fields as strings; absent means 0.
int64_t json_int(const Json& object, const char* field) {
  if (!object.contains(field)) return 0;
  const Json& v = object[field];
  if (v.is_number_integer()) return v.get<int64_t>();
  if (!v.is_string()) return 0;
  const std::string text = v.get<std::string>();
  int64_t n = 0;
  std::from_chars(text.data(), text.data() + text.size(), n);
  return n;
}

// A uint64 field (etcd's member ids, e.g. the leader: the JSON gateway writes them as decimal
// strings, and about half of them exceed int64) as its decimal text; "0" when absent or not a
// number.
std::string json_uint_text(const Json& object, const char* field) {
  if (!object.contains(field)) return "0";
  const Json& v = object[field];
  if (v.is_number_unsigned()) return std::to_string(v.get<uint64_t>());
  if (v.is_number_integer()) return std::to_string(std::max<int64_t>(0, v.get<int64_t>()));
  if (!v.is_string()) return "0";
  const std::string text = v.get<std::string>();
  uint64_t n = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (error != std::errc() || end != text.data() + text.size()) return "0";
  return std::to_string(n);
}

// An etcd reply body as JSON; anything else is an Error (it comes from the network).
Json parse_reply(const std::string& body) {
  Json reply = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (reply.is_discarded() || !reply.is_object()) {
    fail(
        "the reply from etcd is not a JSON object ('{}'); HINT: is --rdzv-endpoint etcd's "
        "client port?",
        body.substr(0, 60));
  }
  return reply;
}

}  // namespace

EtcdStore::EtcdStore(std::string host, int port, std::string scope, Options options)
    : host_(std::move(host)), port_(port), scope_(std::move(scope)), options_(std::move(options)) {
  SHARDTRAIN_CHECK(!scope_.empty() && scope_.front() == '/' && scope_.back() == '/',
                   "etcd scope '{}' must start and end with '/'", scope_);
  if (!options_.tls.ca_file.empty()) {
    tls_ = std::make_unique<EtcdTls>(options_.tls);
  } else if (!options_.tls.cert_file.empty() || !options_.tls.key_file.empty()) {
    fail("--rdzv-conf cert= and key= need cacert= too (the CA of etcd's certificate)");
  }
  if (options_.user.empty() != options_.password.empty()) {
    fail("--rdzv-conf user= and password= go together (etcd's user/password authentication)");
  }
  if (!options_.user.empty()) authenticate();
  if (options_.lease_ttl_seconds <= 0) return;
  const Json grant =
      parse_reply(post("/v3/lease/grant", Json{{"TTL", options_.lease_ttl_seconds}}.dump(),
                       "a lease", request_deadline()));
  lease_id_ = std::to_string(json_int(grant, "ID"));
  keepalive_thread_ = std::thread([this] { keepalive_loop(); });
}

EtcdStore::~EtcdStore() {
  const bool had_thread = keepalive_thread_.joinable();
  stop_keepalive();
  if (had_thread && !lease_id_.empty()) {
    try {
      post("/v3/lease/revoke", Json{{"ID", lease_id_}}.dump(), "lease " + lease_id_,
           Clock::now() + 2s);
    } catch (const Error& e) {
      log::warn("etcd at {}: could not revoke lease {} (it expires by itself): {}", endpoint(),
                lease_id_, e.what());
    }
  }
}

void EtcdStore::stop_keepalive() {
  {
    std::lock_guard<std::mutex> lock(keepalive_mutex_);
    keepalive_stopping_ = true;
  }
  keepalive_stop_.notify_all();
  if (keepalive_thread_.joinable()) keepalive_thread_.join();
}

void EtcdStore::keepalive_loop() {
  const auto period = std::chrono::milliseconds(options_.lease_ttl_seconds * 1000 / 3);
  std::unique_lock<std::mutex> lock(keepalive_mutex_);
  while (!keepalive_stop_.wait_for(lock, period, [this] { return keepalive_stopping_; })) {
    lock.unlock();
    try {
      const Json reply = parse_reply(post("/v3/lease/keepalive", Json{{"ID", lease_id_}}.dump(),
                                          "lease " + lease_id_, Clock::now() + period));
      if (json_int(reply.value("result", Json::object()), "TTL") <= 0) {
        log::warn("etcd at {}: lease {} has expired; this agent's membership keys are gone",
                  endpoint(), lease_id_);
      }
    } catch (const std::exception& e) {
      log::warn("etcd at {}: lease keepalive failed (retrying): {}", endpoint(), e.what());
    }
    lock.lock();
  }
}

std::string EtcdStore::endpoint() const { return tcp_store_wire::format_endpoint(host_, port_); }

EtcdStore::ServerStatus EtcdStore::server_status(Duration timeout) {
  ServerStatus status;
  std::string error;
  const auto sent = std::chrono::system_clock::now();
  std::string headers;
  if (!options_.user.empty()) headers = "Authorization: " + auth_token() + "\r\n";
  const auto response = http_post(host_, port_, "/v3/maintenance/status", headers, "{}", tls_.get(),
                                  Clock::now() + timeout, error);
  const auto received = std::chrono::system_clock::now();
  if (!response) fail("etcd at {}: {}; is etcd running there? check --rdzv-endpoint", endpoint(), error);
  if (response->status != 200) {
    fail("etcd at {}: HTTP {} from /v3/maintenance/status: {}", endpoint(), response->status,
         response->body.substr(0, 200));
  }
  const Json reply = Json::parse(response->body, nullptr, false);
  if (reply.is_discarded() || !reply.is_object()) {
    fail("etcd at {}: /v3/maintenance/status did not answer JSON (is this etcd's client port?)",
         endpoint());
  }
  status.version = reply.value("version", "");
  status.leader = json_uint_text(reply, "leader");
  if (reply.contains("errors") && reply["errors"].is_array()) {
    for (const Json& e : reply["errors"]) status.errors.push_back(e.is_string() ? e.get<std::string>() : e.dump());
  }
  status.round_trip = std::chrono::duration_cast<std::chrono::milliseconds>(received - sent);
  status.local_midpoint = sent + (received - sent) / 2;
  std::tm parsed{};
  const std::string date = response->header("date");
  if (!date.empty() && ::strptime(date.c_str(), "%a, %d %b %Y %H:%M:%S", &parsed) != nullptr) {
    status.server_date = std::chrono::system_clock::from_time_t(::timegm(&parsed));
  }
  return status;
}

Clock::time_point EtcdStore::request_deadline() const {
  return Clock::now() + options_.request_timeout;
}

std::string EtcdStore::lease_for(const std::string& key) const {
  if (lease_id_.empty() || !options_.leased_keys || !options_.leased_keys(key)) return "";
  return lease_id_;
}

std::string EtcdStore::post(const std::string& path, const std::string& body,
                            const std::string& what, Clock::time_point deadline) {
  auto backoff = 10ms;
  std::string error;
  bool authenticated_again = false;
  while (true) {
    std::string headers;
    if (!options_.user.empty()) headers = "Authorization: " + auth_token() + "\r\n";
    if (auto response = http_post(host_, port_, path, headers, body, tls_.get(), deadline, error)) {
      if (response->status == 200) return response->body;
      // A token expires (etcd's simple tokens after 5 idle minutes): get a new one, once.
      const bool token_refused =
          response->status == 401 || response->body.find("invalid auth token") != std::string::npos;
      if (token_refused && !options_.user.empty() && !authenticated_again) {
        authenticated_again = true;
        authenticate();
        continue;
      }
      // 5xx from the gateway while etcd (re)starts is transient; 4xx is our request's fault.
      error =
          fmt::format("HTTP {} from {}: {}", response->status, path, response->body.substr(0, 200));
      if (response->status < 500) break;
    }
    if (Clock::now() + backoff >= deadline) break;
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
  fail("etcd request for {} at {} failed: {}; is etcd running at {}? check --rdzv-endpoint", what,
       endpoint(), error, endpoint());
}

std::string EtcdStore::auth_token() {
  std::lock_guard<std::mutex> lock(auth_mutex_);
  return auth_token_;
}

void EtcdStore::authenticate() {
  const Json request{{"name", options_.user}, {"password", options_.password}};
  std::string error;
  const auto response = http_post(host_, port_, "/v3/auth/authenticate", "", request.dump(),
                                  tls_.get(), request_deadline(), error);
  if (!response)
    fail("etcd at {}: cannot authenticate user '{}': {}", endpoint(), options_.user, error);
  const Json reply = Json::parse(response->body, nullptr, /*allow_exceptions=*/false);
  if (response->status != 200 || !reply.is_object() || !reply.contains("token") ||
      !reply["token"].is_string()) {
    fail(
        "etcd at {}: user '{}' was not authenticated (HTTP {}: {}); HINT: check --rdzv-conf "
        "user= and password=",
        endpoint(), options_.user, response->status, response->body.substr(0, 200));
  }
  std::lock_guard<std::mutex> lock(auth_mutex_);
  auth_token_ = reply["token"].get<std::string>();
}

void EtcdStore::set(const std::string& key, const std::string& value) {
  Json request{{"key", base64_encode(scope_ + key)}, {"value", base64_encode(value)}};
  if (const std::string lease = lease_for(key); !lease.empty()) request["lease"] = lease;
  post("/v3/kv/put", request.dump(), "key '" + key + "'", request_deadline());
}

std::optional<std::string> EtcdStore::read(const std::string& key, Clock::time_point deadline) {
  const Json reply =
      parse_reply(post("/v3/kv/range", Json{{"key", base64_encode(scope_ + key)}}.dump(),
                       "key '" + key + "'", deadline));
  if (!reply.contains("kvs") || reply["kvs"].empty()) return std::nullopt;
  return base64_decode(reply["kvs"][0].value("value", ""));
}

std::optional<std::string> EtcdStore::try_get(const std::string& key) {
  return read(key, request_deadline());
}

std::string EtcdStore::get(const std::string& key, Duration timeout) {
  wait({key}, timeout);
  if (auto value = try_get(key)) return *value;
  fail("etcd at {}: key '{}' was removed while being read", endpoint(), scope_ + key);
}

void EtcdStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  const auto deadline = Clock::now() + timeout;
  for (const auto& key : keys) {
    auto backoff = 10ms;
    // A lost connection is retried only until the wait's own deadline (plus a moment for
    // the last read), so a caller waiting in short slices stays responsive.
    while (!read(key, std::min(request_deadline(), std::max(deadline, Clock::now() + 200ms)))) {
      if (Clock::now() >= deadline) {
        fail(
            "timed out after {} ms waiting for key '{}' in etcd at {}; is etcd running at {} "
            "and did the process that sets it start? check --rdzv-endpoint",
            timeout.count(), scope_ + key, endpoint(), endpoint());
      }
      std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - Clock::now()));
      backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
    }
  }
}

int64_t EtcdStore::add(const std::string& key, int64_t delta) {
  const std::string full_key = base64_encode(scope_ + key);
  while (true) {
    const Json range = parse_reply(post("/v3/kv/range", Json{{"key", full_key}}.dump(),
                                        "key '" + key + "'", request_deadline()));
    int64_t current = 0;
    int64_t mod_revision = 0;  // 0 compares equal for an absent key
    if (range.contains("kvs") && !range["kvs"].empty()) {
      const Json& kv = range["kvs"][0];
      const std::string text = base64_decode(kv.value("value", ""));
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), current);
      if (ec != std::errc() || end != text.data() + text.size()) {
        fail("etcd at {}: add on key '{}' whose value '{}' is not an integer", endpoint(),
             scope_ + key, text);
      }
      mod_revision = json_int(kv, "mod_revision");
    }
    const int64_t next = current + delta;
    Json put{{"key", full_key}, {"value", base64_encode(std::to_string(next))}};
    if (const std::string lease = lease_for(key); !lease.empty()) put["lease"] = lease;
    const Json txn{{"compare", Json::array({Json{{"key", full_key},
                                                 {"result", "EQUAL"},
                                                 {"target", "MOD"},
                                                 {"mod_revision", std::to_string(mod_revision)}}})},
                   {"success", Json::array({Json{{"request_put", put}}})}};
    const Json reply =
        parse_reply(post("/v3/kv/txn", txn.dump(), "key '" + key + "'", request_deadline()));
    if (reply.value("succeeded", false)) return next;
  }
}

std::string EtcdStore::compare_set(const std::string& key, const std::string& expected,
                                   const std::string& desired) {
  const std::string full_key = base64_encode(scope_ + key);
  const Json compare = expected.empty() ? Json{{"key", full_key},
                                               {"result", "EQUAL"},
                                               {"target", "CREATE"},
                                               {"create_revision", "0"}}
                                        : Json{{"key", full_key},
                                               {"result", "EQUAL"},
                                               {"target", "VALUE"},
                                               {"value", base64_encode(expected)}};
  Json put{{"key", full_key}, {"value", base64_encode(desired)}};
  if (const std::string lease = lease_for(key); !lease.empty()) put["lease"] = lease;
  const Json txn{{"compare", Json::array({compare})},
                 {"success", Json::array({Json{{"request_put", put}}})},
                 {"failure", Json::array({Json{{"request_range", Json{{"key", full_key}}}}})}};
  const Json reply =
      parse_reply(post("/v3/kv/txn", txn.dump(), "key '" + key + "'", request_deadline()));
  if (reply.value("succeeded", false)) return desired;
  const Json& range = reply["responses"][0]["response_range"];
  if (!range.contains("kvs") || range["kvs"].empty()) return "";
  return base64_decode(range["kvs"][0].value("value", ""));
}

bool EtcdStore::remove(const std::string& key) {
  const Json reply =
      parse_reply(post("/v3/kv/deleterange", Json{{"key", base64_encode(scope_ + key)}}.dump(),
                       "key '" + key + "'", request_deadline()));
  return json_int(reply, "deleted") > 0;
}

}  // namespace shardtrain
