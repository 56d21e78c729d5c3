// http_request: the bounded parser for what a scraper sends to the /metrics endpoint.
//
// The endpoint serves exactly one thing (GET or HEAD of /metrics, query ignored), so the parser
// only has to decide, from the bytes received so far, whether the request is complete, what it
// asks for, or why it is refused. It never allocates in proportion to the input and looks at no
// more than kMaxRequestHeadBytes: the caller keeps at most that many bytes per connection.
//
//   kIncomplete  the head (request line + headers, up to the blank line) has not all arrived
//   kComplete    a well-formed GET/HEAD without a body: `head_only` for HEAD, `path` without query
//   kRefused     `status` (400 malformed, 404 not /metrics, 405 other method, 411/413 a body or
//                Transfer-Encoding on this GET-only endpoint, 431 head or a header too large,
//                too many headers, 505 not HTTP/1.x) and a one-line `reason`
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace shardtrain {

inline constexpr size_t kMaxRequestHeadBytes = 8192;
inline constexpr size_t kMaxRequestHeaders = 64;

struct HttpRequestVerdict {
  enum class Kind { kIncomplete, kComplete, kRefused };
  Kind kind = Kind::kIncomplete;
  int status = 0;      // kRefused
  std::string reason;  // kRefused
  bool head_only = false;
  std::string path;  // kComplete
};

// `received`: the bytes received on the connection so far (any length; only the first
// kMaxRequestHeadBytes + 4 are looked at).
HttpRequestVerdict parse_http_request(std::string_view received);

// "Not Found" for 404, ...; "Error" for a code it does not know.
const char* http_status_text(int status);

}  // namespace shardtrain
