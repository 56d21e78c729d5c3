#include "io/hub/hub_api.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/hub/hub_cache.h"

namespace shardtrain {
namespace {

using Json = nlohmann::json;

constexpr size_t kMaxInfoBytes = 16u << 20;
constexpr size_t kMaxRepoFiles = 100000;
constexpr int kMaxRelativeRedirects = 5;

// The scheme and host of a URL ("https://huggingface.co"), for comparing origins.
std::string origin_of(const std::string& url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos) return "";
  const size_t path = url.find('/', scheme + 3);
  return url.substr(0, path);
}

// Percent-encodes a revision the way huggingface_hub's quote(revision, safe="") does.
std::string quoted(const std::string& text) {
  std::string out;
  for (const unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

std::string normalized_etag(std::string etag) {
  if (etag.rfind("W/", 0) == 0) etag = etag.substr(2);
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') {
    etag = etag.substr(1, etag.size() - 2);
  }
  return etag;
}

int64_t size_header(const std::string& value) {
  if (value.empty() || value.size() > 18) return -1;
  for (const char c : value)
    if (!std::isdigit(static_cast<unsigned char>(c))) return -1;
  return std::stoll(value);
}

HttpRequest hub_request(const HubSettings& settings, const std::string& method,
                        const std::string& url) {
  HttpRequest request;
  request.method = method;
  request.url = url;
  request.headers = hub_headers(settings, url);
  request.timeout = std::chrono::seconds(30);
  request.max_body_bytes = kMaxInfoBytes;
  return request;
}

}  // namespace

std::vector<std::string> hub_headers(const HubSettings& settings, const std::string& url) {
  std::vector<std::string> headers = {"User-Agent: shardtrain/" SHARDTRAIN_VERSION
                                      " (huggingface_hub-compatible)"};
  if (!settings.token.empty() && origin_of(url) == origin_of(settings.endpoint)) {
    headers.push_back("Authorization: Bearer " + settings.token);
  }
  return headers;
}

void fail_hub_response(const HubTarget& target, const std::string& url,
                       const HttpResponse* response, const std::string& error) {
  const HubSettings& s = *target.settings;
  const std::string& id = target.repo_id;
  if (response == nullptr) {
    // "no local directory": an id of the org/name form is tried on the Hub only when no such
    // path exists, so a mistyped local path ends here too.
    fail(
        "{}: no local directory of that name, and cannot reach the Hugging Face Hub at {} ({}); "
        "HINT: check the path, the network and HTTPS_PROXY/NO_PROXY, or set HF_HUB_OFFLINE=1 "
        "to use only the local cache at {}",
        target.context, s.endpoint, error, s.cache_dir);
  }
  const int status = response->status;
  const std::string code = response->header("x-error-code");
  if (code == "GatedRepo") {
    if (s.token.empty()) {
      fail(
          "{}: {} is a gated model (HTTP {}); HINT: set HF_TOKEN to a token of an account "
          "that accepted its licence at {}/{}",
          target.context, id, status, s.endpoint, id);
    }
    fail(
        "{}: {} is a gated model and the token from {} has no access yet (HTTP {}); HINT: "
        "accept the licence at {}/{} with that account, then run again",
        target.context, id, s.token_source, status, s.endpoint, id);
  }
  if (code == "RevisionNotFound") {
    fail(
        "{}: {} has no revision '{}' (HTTP {}); HINT: set the revision (model.revision or "
        "--revision) to an existing branch, tag or commit",
        target.context, id, target.revision, status);
  }
  if (code == "EntryNotFound") {
    fail("{}: {} at revision '{}' has no file {} (HTTP {})", target.context, id, target.revision,
         url.substr(url.rfind('/') + 1), status);
  }
  if (code == "RepoNotFound" || status == 401 || status == 404) {
    fail(
        "{}: no local directory of that name, and the Hub at {} has no model {} (HTTP {}); "
        "HINT: check the id (org/name) or the path; a private model needs HF_TOKEN{}",
        target.context, s.endpoint, id, status,
        s.token.empty() ? "" : " (the token from " + s.token_source + " was sent)");
  }
  if (status == 403) {
    fail(
        "{}: the Hub refused access to {} (HTTP 403: {}); HINT: check that the token in {} may "
        "read it",
        target.context, id, response->header("x-error-message").substr(0, 120),
        s.token_source.empty() ? "HF_TOKEN" : s.token_source);
  }
  fail("{}: the Hub at {} answered HTTP {} for {}; HINT: try again later{}", target.context,
       s.endpoint, status, url, status == 429 ? " (rate limited; a token raises the limit)" : "");
}

HubRepoInfo fetch_repo_info(const HubTarget& target) {
  const HubSettings& s = *target.settings;
  const std::string url = s.endpoint + "/api/models/" + target.repo_id + "/revision/" +
                          quoted(target.revision) + "?blobs=true";
  std::string error;
  const std::optional<HttpResponse> response = http_request(hub_request(s, "GET", url), error);
  if (!response || response->status != 200)
    fail_hub_response(target, url, response ? &*response : nullptr, error);
  const Json info = Json::parse(response->body, nullptr, /*allow_exceptions=*/false);
  if (!info.is_object() || !info.contains("sha") || !info["sha"].is_string() ||
      !is_commit_hash(info["sha"].get<std::string>())) {
    fail(
        "{}: the Hub's answer at {} is not a model description with a commit; HINT: is "
        "HF_ENDPOINT ({}) a Hugging Face Hub?",
        target.context, url, s.endpoint);
  }
  HubRepoInfo out;
  out.commit = info["sha"].get<std::string>();
  const Json siblings = info.value("siblings", Json::array());
  if (!siblings.is_array() || siblings.size() > kMaxRepoFiles) {
    fail("{}: the Hub's file list at {} is malformed or longer than {} entries", target.context,
         url, kMaxRepoFiles);
  }
  for (const Json& sibling : siblings) {
    if (!sibling.is_object() || !sibling.contains("rfilename") ||
        !sibling["rfilename"].is_string()) {
      continue;
    }
    HubRepoFile file;
    file.name = sibling["rfilename"].get<std::string>();
    if (sibling.contains("size") && sibling["size"].is_number_unsigned()) {
      file.size = sibling["size"].get<int64_t>();
    }
    if (sibling.contains("lfs") && sibling["lfs"].is_object()) {
      const Json& lfs = sibling["lfs"];
      if (lfs.contains("sha256") && lfs["sha256"].is_string()) file.sha256 = lfs["sha256"];
      if (lfs.contains("size") && lfs["size"].is_number_unsigned()) file.size = lfs["size"];
    }
    out.files.push_back(std::move(file));
  }
  return out;
}

HubFileMeta fetch_file_meta(const HubTarget& target, const std::string& commit,
                            const std::string& file) {
  const HubSettings& s = *target.settings;
  std::string url = s.endpoint + "/" + target.repo_id + "/resolve/" + commit + "/" + file;
  for (int hop = 0;; ++hop) {
    HttpRequest request = hub_request(s, "HEAD", url);
    request.headers.push_back("Accept-Encoding: identity");  // the real size, not a compressed one
    std::string error;
    const std::optional<HttpResponse> response = http_request(request, error);
    if (!response || response->status >= 400) {
      fail_hub_response(target, url, response ? &*response : nullptr, error);
    }
    const std::string location = response->header("location");
    const bool redirect = response->status >= 300 && response->status < 400;
    if (redirect && location.empty()) {
      fail("{}: the Hub redirected {} without a Location", target.context, url);
    }
    if (redirect && location.front() == '/') {  // relative: the Hub itself (a renamed repo)
      if (hop >= kMaxRelativeRedirects) fail("{}: too many redirects for {}", target.context, url);
      url = origin_of(url) + location;
      continue;
    }
    HubFileMeta meta;
    meta.commit = response->header("x-repo-commit");
    const std::string linked_etag = response->header("x-linked-etag");
    meta.lfs = !linked_etag.empty();
    meta.etag = normalized_etag(meta.lfs ? linked_etag : response->header("etag"));
    meta.location = redirect ? location : url;
    meta.size = size_header(response->header("x-linked-size"));
    if (meta.size < 0 && !redirect) meta.size = size_header(response->header("content-length"));
    const std::string what = target.context + ": " + file;
    check_etag(meta.etag, what);
    if (meta.location.rfind("http://", 0) != 0 && meta.location.rfind("https://", 0) != 0) {
      fail("{}: the Hub sent an unusable download location for {}", target.context, file);
    }
    return meta;
  }
}

}  // namespace shardtrain
