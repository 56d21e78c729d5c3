// The two Hub HTTP API calls the resolver needs, with the Hub's error codes turned into one-line
// Errors that say what to do:
//
//   repo info  GET  {endpoint}/api/models/{id}/revision/{revision}?blobs=true
//              -> the commit ("sha") and the files ("siblings": rfilename, size, lfs.sha256)
//   file meta  HEAD {endpoint}/{id}/resolve/{commit}/{file}   (Accept-Encoding: identity)
//              -> X-Repo-Commit, the ETag (X-Linked-Etag for LFS files, else ETag, quotes and W/
//                 stripped), the size (X-Linked-Size, else Content-Length), and where the bytes
//                 are: the Location of a redirect (the CDN) or the resolve URL itself. Relative
//                 redirects (a renamed repo) are followed, as huggingface_hub does.
//
// Errors (X-Error-Code first, as huggingface_hub reads them): RepoNotFound / 404 / 401 ->
// "no model <id>" (or private: set HF_TOKEN); GatedRepo -> HF_TOKEN and the licence page;
// RevisionNotFound -> the revision; 429 / 5xx -> try again later; unreachable -> the endpoint,
// the proxy variables and HF_HUB_OFFLINE. `context` starts each message (e.g. "model.path
// org/name"). What the server sends is bounded (16 MiB of JSON, 100,000 files, 64 KiB of
// headers); anything malformed is an Error too.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/http/http_client.h"
#include "io/hub/hub_settings.h"

namespace shardtrain {

struct HubRepoFile {
  std::string name;
  int64_t size = -1;   // -1: the Hub did not say
  std::string sha256;  // LFS files: the content's sha256 (= their ETag); "" otherwise
};

struct HubRepoInfo {
  std::string commit;
  std::vector<HubRepoFile> files;
};

struct HubFileMeta {
  std::string commit;
  std::string etag;
  std::string location;  // where to GET the bytes
  int64_t size = -1;
  bool lfs = false;  // X-Linked-Etag present: the etag is the sha256 of the content
};

struct HubTarget {
  const HubSettings* settings;
  std::string repo_id;
  std::string revision;
  std::string context;  // first words of every error
};

HubRepoInfo fetch_repo_info(const HubTarget& target);
HubFileMeta fetch_file_meta(const HubTarget& target, const std::string& commit,
                            const std::string& file);

// The request headers every Hub request carries (the token only for the endpoint's own host).
std::vector<std::string> hub_headers(const HubSettings& settings, const std::string& url);
// Throws the Error for an unsuccessful Hub response (status >= 400) or a transport failure.
[[noreturn]] void fail_hub_response(const HubTarget& target, const std::string& url,
                                    const HttpResponse* response, const std::string& error);

}  // namespace shardtrain
