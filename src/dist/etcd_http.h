// The HTTP transport of the etcd client (dist/etcd_store.h): one POST per request through the
// shared libcurl client (io/http/http_client.h), over plain HTTP or over TLS with the server's
// certificate checked against a CA file and, when given, a client certificate for etcd's
// --client-cert-auth. Proxy variables are ignored: etcd is on the cluster's own network, and a
// proxy meant for the Hub must not swallow rendezvous traffic.
//
// EtcdTls holds the client side of a TLS setup, checked once when it is made: the CA that signed
// etcd's certificate (required for TLS) and the client certificate and key (both or neither).
// Every problem with them (a missing or unreadable file, a key that does not match the
// certificate) throws Error naming the --rdzv-conf key, before any request is sent. The server's
// certificate must be valid for the host the client connects to (its DNS name or IP address).
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "io/http/http_client.h"

namespace shardtrain {

using EtcdTlsFiles = TlsFiles;  // ca_file: --rdzv-conf cacert= (empty: plain HTTP), cert=, key=

class EtcdTls {
 public:
  // Throws Error as described above. REQUIRES: files.ca_file is not empty.
  explicit EtcdTls(const EtcdTlsFiles& files);

  const EtcdTlsFiles& files() const { return files_; }

 private:
  EtcdTlsFiles files_;
};

// POSTs `body` (JSON) to http(s)://host:port`path` with the extra `headers` ("Name: value\r\n"
// lines). Returns nullopt with `error` set when the server cannot be reached, the TLS handshake
// fails, or the response is cut off, malformed or larger than 64 MiB before `deadline`.
// `tls` null: plain HTTP. The response's header("date") is etcd's clock (doctor's skew check).
std::optional<HttpResponse> http_post(const std::string& host, int port, const std::string& path,
                                      const std::string& headers, const std::string& body,
                                      const EtcdTls* tls,
                                      std::chrono::steady_clock::time_point deadline,
                                      std::string& error);

}  // namespace shardtrain
