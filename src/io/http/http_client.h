// One HTTP(S) request through libcurl: the transport of the Hugging Face Hub client (io/hub/) and
// of the etcd gateway client (dist/etcd_http.h), so TLS, redirects, ranges and proxies are a
// well-kept library's job rather than ours.
//
// What a request gets: TLS with the system's CA store (or `tls.ca_file`) and an optional client
// certificate; redirects followed when asked (a bounded number, to any host: the Hub sends
// weight files to its CDN); a "Range: bytes=N-" request when `range_start` > 0; the proxy
// variables users set (HTTPS_PROXY, https_proxy, http_proxy, NO_PROXY, no_proxy; libcurl reads
// them) unless `use_proxy_env` is false; a connect timeout, an overall deadline, and a
// low-speed limit that ends a transfer stuck below 1 KiB/s.
//
// What a server can send is bounded: the headers of each response (`max_header_bytes`), the
// body kept in memory (`max_body_bytes`), the number of redirects. A body streamed to
// `body_sink` is not bounded here: the sink sees every chunk of a 2xx body and returns false to
// stop (the Hub downloader stops at the size the metadata promised). Bodies of non-2xx
// responses always go to HttpResponse::body (bounded), never to the sink.
//
// Returns nullopt with `error` set (one line, from libcurl's own message) when no complete
// response arrived: unreachable host, refused TLS, timeout, a cut-off transfer, a limit hit, or a
// sink that stopped. HTTP error statuses are responses, not errors: the caller judges them.
// Thread-safe (each call has its own handle; libcurl's global setup runs once).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace shardtrain {

struct TlsFiles {
  std::string ca_file;    // PEM CA bundle the server's certificate must chain to; "" = system's
  std::string cert_file;  // PEM client certificate; "" = none
  std::string key_file;   // its private key
};

// Why a request got no response (HttpFailure::kNone when it did).
enum class HttpFailure {
  kNone,
  kConnect,      // name not resolved, connection refused, proxy unreachable
  kTls,          // handshake failed, certificate not accepted, client certificate refused
  kTimeout,      // deadline or low-speed limit
  kCutOff,       // the connection closed before the response was complete
  kTooLarge,     // headers or in-memory body over their bound
  kSinkStopped,  // body_sink returned false
  kOther,
};

struct HttpRequest {
  std::string method = "GET";        // GET, HEAD or POST
  std::string url;                   // http:// or https://
  std::vector<std::string> headers;  // "Name: value"
  std::string body;                  // sent with POST
  bool follow_redirects = false;
  int max_redirects = 5;
  uint64_t range_start = 0;  // > 0: ask for bytes [range_start, end)
  bool use_proxy_env = true;
  TlsFiles tls;
  std::chrono::milliseconds connect_timeout{10000};
  // 0: no overall limit (long downloads rely on the low-speed limit instead).
  std::chrono::milliseconds timeout{0};
  int low_speed_seconds = 60;  // abort when below 1 KiB/s for this long (0 = never)
  size_t max_header_bytes = 64u << 10;
  size_t max_body_bytes = 64u << 20;
  // Receives the body of a 2xx response in chunks instead of HttpResponse::body, with the
  // response's status (200 or 206: whether the server honoured the range).
  std::function<bool(int status, const char* data, size_t bytes)> body_sink;
};

struct HttpResponse {
  int status = 0;
  // The headers of the last response (after redirects), names lowercased, in order.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::string url;  // the URL that answered (after redirects)

  // The first value of header `lowercase_name`, or "" when absent.
  std::string header(const std::string& lowercase_name) const;
};

std::optional<HttpResponse> http_request(const HttpRequest& request, std::string& error,
                                         HttpFailure* failure = nullptr);

}  // namespace shardtrain
