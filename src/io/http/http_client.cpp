#include "io/http/http_client.h"

#include <curl/curl.h>
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <memory>
#include <mutex>

namespace shardtrain {
namespace {

void init_curl_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

std::string trimmed(std::string text) {
  const size_t begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  const size_t end = text.find_last_not_of(" \t\r\n");
  return text.substr(begin, end - begin + 1);
}

// What the callbacks fill in while libcurl runs one request.
struct Transfer {
  const HttpRequest* request = nullptr;
  HttpResponse response;
  size_t header_bytes = 0;  // of the current response
  bool too_large = false;
  bool sink_stopped = false;
};

size_t on_header(char* data, size_t size, size_t count, void* user) {
  Transfer& t = *static_cast<Transfer*>(user);
  const size_t bytes = size * count;
  std::string line(data, bytes);
  if (line.rfind("HTTP/", 0) == 0) {  // a new response (after a redirect or a 100 Continue)
    t.response.headers.clear();
    t.header_bytes = 0;
    const size_t space = line.find(' ');
    t.response.status = space == std::string::npos ? 0 : std::atoi(line.c_str() + space + 1);
  }
  t.header_bytes += bytes;
  if (t.header_bytes > t.request->max_header_bytes) {
    t.too_large = true;
    return 0;  // libcurl aborts the transfer
  }
  const size_t colon = line.find(':');
  if (colon != std::string::npos && line.rfind("HTTP/", 0) != 0) {
    std::string name = line.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    t.response.headers.emplace_back(trimmed(name), trimmed(line.substr(colon + 1)));
  }
  return bytes;
}

size_t on_body(char* data, size_t size, size_t count, void* user) {
  Transfer& t = *static_cast<Transfer*>(user);
  const size_t bytes = size * count;
  const bool success = t.response.status >= 200 && t.response.status < 300;
  if (success && t.request->body_sink) {
    if (!t.request->body_sink(t.response.status, data, bytes)) {
      t.sink_stopped = true;
      return 0;
    }
    return bytes;
  }
  if (t.response.body.size() + bytes > t.request->max_body_bytes) {
    t.too_large = true;
    return 0;
  }
  t.response.body.append(data, bytes);
  return bytes;
}

HttpFailure classify(CURLcode code, const Transfer& t, bool tls, const std::string& message) {
  if (t.too_large) return HttpFailure::kTooLarge;
  if (t.sink_stopped) return HttpFailure::kSinkStopped;
  switch (code) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
      return HttpFailure::kConnect;
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_CRL_BADFILE:
      return HttpFailure::kTls;
    case CURLE_OPERATION_TIMEDOUT:
      return HttpFailure::kTimeout;
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
      // A TLS alert (e.g. a client certificate the server refused after a TLS 1.3 handshake)
      // arrives as a read error.
      return tls && message.find("SSL") != std::string::npos ? HttpFailure::kTls
                                                             : HttpFailure::kCutOff;
    case CURLE_PARTIAL_FILE:
    case CURLE_GOT_NOTHING:
      return HttpFailure::kCutOff;
    default:
      return HttpFailure::kOther;
  }
}

struct CurlDeleter {
  void operator()(CURL* curl) const { curl_easy_cleanup(curl); }
};
struct SlistDeleter {
  void operator()(curl_slist* list) const { curl_slist_free_all(list); }
};

}  // namespace

std::string HttpResponse::header(const std::string& lowercase_name) const {
  for (const auto& [name, value] : headers) {
    if (name == lowercase_name) return value;
  }
  return "";
}

std::optional<HttpResponse> http_request(const HttpRequest& request, std::string& error,
                                         HttpFailure* failure) {
  init_curl_once();
  if (failure != nullptr) *failure = HttpFailure::kNone;
  std::unique_ptr<CURL, CurlDeleter> curl(curl_easy_init());
  if (!curl) {
    error = "libcurl could not start a request";
    if (failure != nullptr) *failure = HttpFailure::kOther;
    return std::nullopt;
  }
  CURL* c = curl.get();
  Transfer transfer;
  transfer.request = &request;
  char curl_error[CURL_ERROR_SIZE] = {0};
  std::unique_ptr<curl_slist, SlistDeleter> headers;
  for (const std::string& header : request.headers) {
    curl_slist* appended = curl_slist_append(headers.get(), header.c_str());
    headers.release();
    headers.reset(appended);
  }
  const std::string range = fmt::format("{}-", request.range_start);

  curl_easy_setopt(c, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, curl_error);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);  // timeouts without SIGALRM (threads call this)
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &transfer);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &transfer);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(request.connect_timeout.count()));
  if (request.timeout.count() > 0) {
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(request.timeout.count()));
  }
  if (request.low_speed_seconds > 0) {
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, static_cast<long>(request.low_speed_seconds));
  }
  if (request.follow_redirects) {
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, static_cast<long>(request.max_redirects));
  }
  if (!request.use_proxy_env) curl_easy_setopt(c, CURLOPT_PROXY, "");
  if (request.range_start > 0) curl_easy_setopt(c, CURLOPT_RANGE, range.c_str());
  if (!request.tls.ca_file.empty())
    curl_easy_setopt(c, CURLOPT_CAINFO, request.tls.ca_file.c_str());
  if (!request.tls.cert_file.empty()) {
    curl_easy_setopt(c, CURLOPT_SSLCERT, request.tls.cert_file.c_str());
    curl_easy_setopt(c, CURLOPT_SSLKEY, request.tls.key_file.c_str());
  }
  if (request.method == "HEAD") {
    curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
  } else if (request.method == "POST") {
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, request.body.data());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
  }
  if (headers) curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());

  const CURLcode code = curl_easy_perform(c);
  if (code != CURLE_OK) {
    const std::string message = curl_error[0] != '\0' ? curl_error : curl_easy_strerror(code);
    const bool tls = request.url.rfind("https://", 0) == 0;
    const HttpFailure kind = classify(code, transfer, tls, message);
    if (kind == HttpFailure::kTooLarge) {
      error = fmt::format("the response is larger than allowed ({} bytes of headers, {} of body)",
                          request.max_header_bytes, request.max_body_bytes);
    } else if (kind == HttpFailure::kSinkStopped) {
      error = "the transfer was stopped by its receiver";
    } else {
      error = message;
    }
    if (failure != nullptr) *failure = kind;
    return std::nullopt;
  }
  char* effective_url = nullptr;
  curl_easy_getinfo(c, CURLINFO_EFFECTIVE_URL, &effective_url);
  if (effective_url != nullptr) transfer.response.url = effective_url;
  return std::move(transfer.response);
}

}  // namespace shardtrain
