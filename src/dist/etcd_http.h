// The HTTP transport of the etcd client (dist/etcd_store.h): one HTTP/1.1 POST per connection
// ("Connection: close"), over plain TCP or over TLS (OpenSSL) with the server's certificate
// checked against a CA file and, when given, a client certificate for etcd's
// --client-cert-auth.
//
// EtcdTls holds the client side of a TLS setup, loaded once: the CA that signed etcd's
// certificate (required for TLS) and the client certificate and key (both or neither). Every
// problem with them (a missing or unreadable file, a key that does not match the certificate)
// throws Error naming the --rdzv-conf key. The server's certificate must be valid for the host
// the client connects to (its DNS name or IP address).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

namespace shardtrain {

struct EtcdTlsFiles {
  std::string ca_file;    // --rdzv-conf cacert=; empty: plain HTTP
  std::string cert_file;  // --rdzv-conf cert=
  std::string key_file;   // --rdzv-conf key=
};

class EtcdTls {
 public:
  // Throws Error as described above. REQUIRES: files.ca_file is not empty.
  explicit EtcdTls(const EtcdTlsFiles& files);
  ~EtcdTls();
  EtcdTls(const EtcdTls&) = delete;
  EtcdTls& operator=(const EtcdTls&) = delete;

  void* context() const { return context_; }  // SSL_CTX*

 private:
  void* context_ = nullptr;
};

struct HttpResponse {
  int status = 0;
  std::string body;
  std::string date;  // the Date header's value (lowercased), "" when absent
};

// POSTs `body` (JSON) to http(s)://host:port`path` with the extra `headers` ("Name: value\r\n"
// lines). Returns nullopt with `error` set when the server cannot be reached, the TLS handshake
// fails, or the response is cut off, malformed or larger than 64 MiB before `deadline`.
// `tls` null: plain HTTP.
std::optional<HttpResponse> http_post(const std::string& host, int port, const std::string& path,
                                      const std::string& headers, const std::string& body,
                                      const EtcdTls* tls,
                                      std::chrono::steady_clock::time_point deadline,
                                      std::string& error);

}  // namespace shardtrain
