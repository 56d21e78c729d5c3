#include "obs/http_request.h"

#include <algorithm>
#include <cctype>

namespace shardtrain {
namespace {

HttpRequestVerdict refuse(int status, std::string reason) {
  HttpRequestVerdict verdict;
  verdict.kind = HttpRequestVerdict::Kind::kRefused;
  verdict.status = status;
  verdict.reason = std::move(reason);
  return verdict;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\r')) {
    text.remove_suffix(1);
  }
  return text;
}

// A token of RFC 9110 (method names, header names).
bool is_token(std::string_view text) {
  if (text.empty()) return false;
  return std::all_of(text.begin(), text.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u > 32 && u < 127 &&
           std::string_view("()<>@,;:\\\"/[]?={}").find(c) == std::string_view::npos;
  });
}

}  // namespace

HttpRequestVerdict parse_http_request(std::string_view received) {
  // The head ends at the first blank line; accept bare LF line ends as well as CRLF.
  const std::string_view window = received.substr(0, kMaxRequestHeadBytes + 4);
  size_t head_end = std::string_view::npos;
  for (size_t i = 0; i < window.size(); ++i) {
    if (window[i] != '\n') continue;
    if (i + 1 < window.size() && window[i + 1] == '\n') {
      head_end = i + 1;
      break;
    }
    if (i + 2 < window.size() && window[i + 1] == '\r' && window[i + 2] == '\n') {
      head_end = i + 2;
      break;
    }
  }
  if (head_end == std::string_view::npos) {
    if (window.size() > kMaxRequestHeadBytes) {
      return refuse(431, "request line and headers over 8 KiB");
    }
    // A request line that is already invalid need not wait for the rest.
    const size_t first_line = window.find('\n');
    if (first_line == std::string_view::npos && !window.empty() &&
        !std::isupper(static_cast<unsigned char>(window[0]))) {
      return refuse(400, "not an HTTP request");
    }
    return {};
  }
  if (head_end > kMaxRequestHeadBytes) return refuse(431, "request line and headers over 8 KiB");
  const std::string_view head = window.substr(0, head_end);

  size_t line_end = head.find('\n');
  const std::string_view request_line = trim(head.substr(0, line_end));
  const size_t space1 = request_line.find(' ');
  const size_t space2 =
      space1 == std::string_view::npos ? space1 : request_line.find(' ', space1 + 1);
  if (space2 == std::string_view::npos ||
      request_line.find(' ', space2 + 1) != std::string_view::npos) {
    return refuse(400, "malformed request line");
  }
  const std::string_view method = request_line.substr(0, space1);
  const std::string_view target = request_line.substr(space1 + 1, space2 - space1 - 1);
  const std::string_view version = request_line.substr(space2 + 1);
  if (!is_token(method) || target.empty()) return refuse(400, "malformed request line");
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    return refuse(505, "only HTTP/1.0 and HTTP/1.1 are served");
  }

  size_t headers = 0;
  bool body = false;
  for (size_t start = line_end + 1; start < head.size();) {
    const size_t end = head.find('\n', start);
    const std::string_view line = head.substr(start, end - start);
    start = end == std::string_view::npos ? head.size() : end + 1;
    if (trim(line).empty()) break;  // the blank line ending the head
    if (++headers > kMaxRequestHeaders) return refuse(431, "more than 64 headers");
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || !is_token(line.substr(0, colon))) {
      return refuse(400, "malformed header line");
    }
    const std::string_view name = line.substr(0, colon);
    const std::string_view value = trim(line.substr(colon + 1));
    if (iequals(name, "Transfer-Encoding")) body = true;
    if (iequals(name, "Content-Length") && value != "0") body = true;
  }

  const bool get = method == "GET";
  const bool head_request = method == "HEAD";
  if (!get && !head_request) return refuse(405, "only GET and HEAD are served");
  // A GET-only endpoint has no use for a body; refusing it up front means none is ever read.
  if (body) return refuse(413, "a request body is not accepted by /metrics");
  std::string_view path = target.substr(0, target.find('?'));
  if (path.size() > 7 && (path.substr(0, 7) == "http://")) {  // absolute form
    const size_t slash = path.find('/', 7);
    path = slash == std::string_view::npos ? std::string_view("/") : path.substr(slash);
  }
  if (path != "/metrics") return refuse(404, "only /metrics is served");
  HttpRequestVerdict verdict;
  verdict.kind = HttpRequestVerdict::Kind::kComplete;
  verdict.head_only = head_request;
  verdict.path = std::string(path);
  return verdict;
}

const char* http_status_text(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 413:
      return "Content Too Large";
    case 431:
      return "Request Header Fields Too Large";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Error";
  }
}

}  // namespace shardtrain
