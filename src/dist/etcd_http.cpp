#include "dist/etcd_http.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "dist/tcp_store_wire.h"

namespace shardtrain {
namespace {

using Clock = std::chrono::steady_clock;

// No reply of etcd to our requests comes near this; a larger one is not from etcd.
constexpr size_t kMaxResponseBytes = 64u << 20;

std::string openssl_error() {
  const unsigned long code = ERR_get_error();
  if (code == 0) return "unknown TLS error";
  char text[256];
  ERR_error_string_n(code, text, sizeof(text));
  ERR_clear_error();
  return text;
}

// Decodes a "Transfer-Encoding: chunked" body.
std::optional<std::string> dechunk(const std::string& raw) {
  std::string out;
  size_t at = 0;
  while (true) {
    const size_t line_end = raw.find("\r\n", at);
    if (line_end == std::string::npos) return std::nullopt;
    const size_t size = std::strtoul(raw.substr(at, line_end - at).c_str(), nullptr, 16);
    at = line_end + 2;
    if (size == 0) return out;
    if (size > raw.size() - at) return std::nullopt;
    out += raw.substr(at, size);
    at += size + 2;
    if (at > raw.size()) return std::nullopt;
  }
}

std::optional<HttpResponse> parse_response(const std::string& raw, std::string& error) {
  const size_t header_end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.", 0) != 0 || header_end == std::string::npos || raw.size() < 12) {
    error =
        "not an HTTP response (is this etcd's client port, and does it speak TLS only when "
        "--rdzv-conf cacert is given?)";
    return std::nullopt;
  }
  HttpResponse response;
  response.status = std::atoi(raw.c_str() + 9);
  std::string headers = raw.substr(0, header_end);
  std::transform(headers.begin(), headers.end(), headers.begin(), ::tolower);
  response.body = raw.substr(header_end + 4);
  if (const size_t date = headers.find("\r\ndate:"); date != std::string::npos) {
    const size_t begin = headers.find_first_not_of(' ', date + 7);
    if (begin != std::string::npos) {
      response.date = headers.substr(begin, headers.find("\r\n", begin) - begin);
    }
  }
  if (headers.find("transfer-encoding: chunked") != std::string::npos) {
    auto decoded = dechunk(response.body);
    if (!decoded) {
      error = "truncated chunked response";
      return std::nullopt;
    }
    response.body = std::move(*decoded);
  }
  return response;
}

// One connection's byte stream: the socket, or a TLS session over it.
class Channel {
 public:
  Channel(int fd, SSL* ssl) : fd_(fd), ssl_(ssl) {}
  ~Channel() {
    if (ssl_ != nullptr) {
      SSL_shutdown(ssl_);
      SSL_free(ssl_);
    }
    ::close(fd_);
  }
  bool send(const std::string& bytes) {
    if (ssl_ == nullptr) return tcp_store_wire::send_all(fd_, bytes);
    size_t written = 0;
    return SSL_write_ex(ssl_, bytes.data(), bytes.size(), &written) == 1 && written == bytes.size();
  }
  // Reads everything until the peer closes, or fails (`error`) at the deadline or the size cap.
  bool receive_all(std::string& raw, Clock::time_point deadline, std::string& error) {
    char buffer[16384];
    while (true) {
      const bool buffered = ssl_ != nullptr && SSL_pending(ssl_) > 0;
      if (!buffered) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        pollfd p{fd_, POLLIN, 0};
        const int ready = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(left.count(), 0)));
        if (ready < 0 && errno == EINTR) continue;
        if (ready == 0) {
          error = "no response before the timeout";
          return false;
        }
      }
      ssize_t n = 0;
      if (ssl_ == nullptr) {
        n = ::recv(fd_, buffer, sizeof(buffer), 0);
        if (n < 0 && errno == EINTR) continue;
      } else {
        size_t got = 0;
        n = SSL_read_ex(ssl_, buffer, sizeof(buffer), &got) == 1 ? static_cast<ssize_t>(got) : 0;
      }
      if (n <= 0) return true;  // closed: "Connection: close" ends the response here
      raw.append(buffer, static_cast<size_t>(n));
      if (raw.size() > kMaxResponseBytes) {
        error = fmt::format("response larger than {} bytes (is this etcd's client port?)",
                            kMaxResponseBytes);
        return false;
      }
    }
  }

 private:
  int fd_;
  SSL* ssl_;
};

// The TLS session over `fd` with etcd at `host`, its certificate verified; nullptr with `error`.
SSL* start_tls(const EtcdTls& tls, int fd, const std::string& host, Clock::time_point deadline,
               std::string& error) {
  SSL* ssl = SSL_new(static_cast<SSL_CTX*>(tls.context()));
  if (ssl == nullptr) {
    error = "TLS: " + openssl_error();
    return nullptr;
  }
  in6_addr ignored{};
  const bool is_ip = ::inet_pton(AF_INET, host.c_str(), &ignored) == 1 ||
                     ::inet_pton(AF_INET6, host.c_str(), &ignored) == 1;
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
  if (is_ip) {
    X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str());
  } else {
    SSL_set_tlsext_host_name(ssl, host.c_str());
    X509_VERIFY_PARAM_set1_host(param, host.c_str(), 0);
  }
  // The handshake runs on the blocking socket, bounded by a receive timeout.
  const auto left = std::max<int64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count(), 1);
  timeval timeout{static_cast<time_t>(left / 1000), static_cast<suseconds_t>(left % 1000 * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  SSL_set_fd(ssl, fd);
  if (SSL_connect(ssl) != 1) {
    const long verify = SSL_get_verify_result(ssl);
    error = verify != X509_V_OK
                ? fmt::format("TLS: etcd's certificate was not accepted: {}",
                              X509_verify_cert_error_string(verify))
                : "TLS handshake failed: " + openssl_error() +
                      " (does etcd speak TLS there, and does it accept the client certificate?)";
    SSL_free(ssl);
    return nullptr;
  }
  return ssl;
}

}  // namespace

EtcdTls::EtcdTls(const EtcdTlsFiles& files) {
  SHARDTRAIN_CHECK(!files.ca_file.empty(), "EtcdTls needs a CA file");
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (ctx == nullptr) fail("cannot set up TLS for etcd: {}", openssl_error());
  context_ = ctx;
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  if (SSL_CTX_load_verify_locations(ctx, files.ca_file.c_str(), nullptr) != 1) {
    const std::string why = openssl_error();
    SSL_CTX_free(ctx);
    fail(
        "--rdzv-conf cacert={}: cannot load the CA certificate ({}); HINT: give the PEM file "
        "of the CA that signed etcd's certificate",
        files.ca_file, why);
  }
  if (files.cert_file.empty() != files.key_file.empty()) {
    SSL_CTX_free(ctx);
    fail(
        "--rdzv-conf cert= and key= go together (a client certificate and its private key); "
        "got only {}",
        files.cert_file.empty() ? "key" : "cert");
  }
  if (!files.cert_file.empty()) {
    const char* problem = nullptr;
    if (SSL_CTX_use_certificate_chain_file(ctx, files.cert_file.c_str()) != 1) {
      problem = "cert";
    } else if (SSL_CTX_use_PrivateKey_file(ctx, files.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
      problem = "key";
    } else if (SSL_CTX_check_private_key(ctx) != 1) {
      problem = "key";
    }
    if (problem != nullptr) {
      const std::string why = openssl_error();
      SSL_CTX_free(ctx);
      fail(
          "--rdzv-conf {}={}: cannot use it ({}); HINT: give the PEM client certificate and "
          "its matching private key",
          problem, std::string(problem) == "cert" ? files.cert_file : files.key_file, why);
    }
  }
}

EtcdTls::~EtcdTls() { SSL_CTX_free(static_cast<SSL_CTX*>(context_)); }

std::optional<HttpResponse> http_post(const std::string& host, int port, const std::string& path,
                                      const std::string& headers, const std::string& body,
                                      const EtcdTls* tls, Clock::time_point deadline,
                                      std::string& error) {
  const int fd = tcp_store_wire::connect_tcp(host, port, error);
  if (fd < 0) return std::nullopt;
  SSL* ssl = nullptr;
  if (tls != nullptr) {
    ssl = start_tls(*tls, fd, host, deadline, error);
    if (ssl == nullptr) {
      ::close(fd);
      return std::nullopt;
    }
  }
  Channel channel(fd, ssl);
  const std::string request = fmt::format(
      "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n"
      "{}Connection: close\r\n\r\n{}",
      path, tcp_store_wire::format_endpoint(host, port), body.size(), headers, body);
  if (!channel.send(request)) {
    error = "connection lost while sending";
    return std::nullopt;
  }
  std::string raw;
  if (!channel.receive_all(raw, deadline, error)) return std::nullopt;
  return parse_response(raw, error);
}

}  // namespace shardtrain
