#include "dist/etcd_http.h"

#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <memory>

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

struct SslContextDeleter {
  void operator()(SSL_CTX* ctx) const { SSL_CTX_free(ctx); }
};

// The "Name: value\r\n" lines of `headers`, one string each.
std::vector<std::string> header_lines(const std::string& headers) {
  std::vector<std::string> lines;
  size_t begin = 0;
  while (begin < headers.size()) {
    size_t end = headers.find("\r\n", begin);
    if (end == std::string::npos) end = headers.size();
    if (end > begin) lines.push_back(headers.substr(begin, end - begin));
    begin = end + 2;
  }
  return lines;
}

std::string transport_error(HttpFailure failure, const std::string& message) {
  switch (failure) {
    case HttpFailure::kTls:
      if (message.find("certificate problem") != std::string::npos ||
          message.find("certificate verify") != std::string::npos) {
        return "TLS: etcd's certificate was not accepted: " + message;
      }
      return "TLS handshake failed: " + message +
             " (does etcd speak TLS there, and does it accept the client certificate?)";
    case HttpFailure::kTimeout:
      return "no response before the timeout (" + message + ")";
    case HttpFailure::kTooLarge:
      return fmt::format("response larger than {} bytes (is this etcd's client port?)",
                         kMaxResponseBytes);
    case HttpFailure::kCutOff:
    case HttpFailure::kOther:
      return message +
             " (is this etcd's client port, and does it speak TLS only when --rdzv-conf cacert "
             "is given?)";
    default:
      return message;
  }
}

}  // namespace

// The files are loaded once into a throwaway OpenSSL context so that a wrong file is reported
// by its --rdzv-conf key here, not as a handshake failure on every request later.
EtcdTls::EtcdTls(const EtcdTlsFiles& files) : files_(files) {
  SHARDTRAIN_CHECK(!files.ca_file.empty(), "EtcdTls needs a CA file");
  std::unique_ptr<SSL_CTX, SslContextDeleter> ctx(SSL_CTX_new(TLS_client_method()));
  if (!ctx) fail("cannot set up TLS for etcd: {}", openssl_error());
  if (SSL_CTX_load_verify_locations(ctx.get(), files.ca_file.c_str(), nullptr) != 1) {
    fail(
        "--rdzv-conf cacert={}: cannot load the CA certificate ({}); HINT: give the PEM file "
        "of the CA that signed etcd's certificate",
        files.ca_file, openssl_error());
  }
  if (files.cert_file.empty() != files.key_file.empty()) {
    fail(
        "--rdzv-conf cert= and key= go together (a client certificate and its private key); "
        "got only {}",
        files.cert_file.empty() ? "key" : "cert");
  }
  if (files.cert_file.empty()) return;
  const char* problem = nullptr;
  if (SSL_CTX_use_certificate_chain_file(ctx.get(), files.cert_file.c_str()) != 1) {
    problem = "cert";
  } else if (SSL_CTX_use_PrivateKey_file(ctx.get(), files.key_file.c_str(), SSL_FILETYPE_PEM) !=
                 1 ||
             SSL_CTX_check_private_key(ctx.get()) != 1) {
    problem = "key";
  }
  if (problem != nullptr) {
    fail(
        "--rdzv-conf {}={}: cannot use it ({}); HINT: give the PEM client certificate and "
        "its matching private key",
        problem, std::string(problem) == "cert" ? files.cert_file : files.key_file,
        openssl_error());
  }
}

std::optional<HttpResponse> http_post(const std::string& host, int port, const std::string& path,
                                      const std::string& headers, const std::string& body,
                                      const EtcdTls* tls, Clock::time_point deadline,
                                      std::string& error) {
  HttpRequest request;
  request.method = "POST";
  request.url = fmt::format("{}://{}{}", tls != nullptr ? "https" : "http",
                            tcp_store_wire::format_endpoint(host, port), path);
  request.headers = header_lines(headers);
  request.headers.push_back("Content-Type: application/json");
  request.headers.push_back("Expect:");  // no 100-continue round trip for small JSON bodies
  request.body = body;
  request.use_proxy_env = false;
  if (tls != nullptr) request.tls = tls->files();
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  request.timeout = std::max(left, std::chrono::milliseconds(1));
  request.connect_timeout = request.timeout;
  request.low_speed_seconds = 0;  // the deadline bounds the request
  request.max_body_bytes = kMaxResponseBytes;
  HttpFailure failure = HttpFailure::kNone;
  std::string message;
  std::optional<HttpResponse> response = http_request(request, message, &failure);
  if (!response) error = transport_error(failure, message);
  return response;
}

}  // namespace shardtrain
