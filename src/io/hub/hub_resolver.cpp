#include "io/hub/hub_resolver.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "core/error.h"
#include "io/file_lock.h"
#include "io/hub/hub_api.h"
#include "io/hub/hub_cache.h"
#include "io/hub/hub_download.h"
#include "io/read_file.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr const char* kIndex = "model.safetensors.index.json";
constexpr const char* kSingleWeights = "model.safetensors";
constexpr uint64_t kMaxIndexBytes = 64u << 20;
constexpr size_t kMaxShards = 10000;

// The shard files the index in `path` names, checked (relative names, *.safetensors, bounded).
std::vector<std::string> index_shards(const std::string& path, const std::string& context) {
  std::error_code ec;
  if (fs::file_size(path, ec) > kMaxIndexBytes) {
    fail("{}: {} is larger than {} bytes; HINT: is it a safetensors index?", context, path,
         kMaxIndexBytes);
  }
  const Json index = Json::parse(read_file(path), nullptr, /*allow_exceptions=*/false);
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    fail(
        "{}: {} has no \"weight_map\" object; HINT: the repository's safetensors index is "
        "malformed",
        context, path);
  }
  std::set<std::string> shards;
  for (const auto& [tensor, file] : index["weight_map"].items()) {
    if (!file.is_string())
      fail("{}: {}: weight_map[\"{}\"] is not a file name", context, path, tensor);
    const std::string name = file.get<std::string>();
    check_repo_file_name(name, context + ": " + path);
    if (name.size() < 12 || name.substr(name.size() - 12) != ".safetensors") {
      fail("{}: {} names '{}', which is not a .safetensors file", context, path, name);
    }
    shards.insert(name);
    if (shards.size() > kMaxShards)
      fail("{}: {} names more than {} shard files", context, path, kMaxShards);
  }
  return {shards.begin(), shards.end()};
}

// The snapshot dir when the cache holds the whole set for `revision`, else nullopt.
std::optional<std::string> complete_snapshot(const HubCacheRepo& repo, const HubRequest& request) {
  const std::optional<std::string> commit = repo.cached_commit(request.revision);
  if (!commit) return std::nullopt;
  const auto known = [&](const std::string& name) {
    return repo.has_file(*commit, name) || repo.marked_missing(*commit, name);
  };
  if (!repo.has_file(*commit, "config.json")) return std::nullopt;
  for (const std::string& name : hub_file_names(request.files))
    if (!known(name)) return std::nullopt;
  if (request.files == HubFiles::kModel && repo.has_file(*commit, kIndex)) {
    for (const std::string& shard :
         index_shards(repo.snapshot_file(*commit, kIndex), request.context))
      if (!repo.has_file(*commit, shard)) return std::nullopt;
  }
  return repo.snapshot_dir(*commit);
}

class Fetcher {
 public:
  Fetcher(const HubTarget& target, const HubCacheRepo& repo, const HubRepoInfo& info)
      : target_(target), repo_(repo), info_(info) {
    for (const HubRepoFile& file : info_.files) files_[file.name] = &file;
  }

  bool in_repo(const std::string& name) const { return files_.count(name) > 0; }

  // Downloads `name` at the info's commit unless the snapshot has it; links it.
  void fetch(const std::string& name) {
    const std::string& commit = info_.commit;
    if (repo_.has_file(commit, name)) return;
    const HubRepoFile& listed = *files_.at(name);
    const HubFileMeta meta = fetch_file_meta(target_, commit, name);
    const std::string what = target_.context + ": " + name;
    if (!meta.commit.empty() && meta.commit != commit) {
      fail("{}: the Hub answered for commit {} instead of {}; HINT: run again", what, meta.commit,
           commit);
    }
    if (listed.size >= 0 && meta.size >= 0 && listed.size != meta.size) {
      fail("{}: the Hub gives two sizes ({} and {} bytes); HINT: run again", what, listed.size,
           meta.size);
    }
    HubBlob blob;
    blob.file = name;
    blob.url = meta.location;
    blob.etag = meta.etag;
    const int64_t size = meta.size >= 0 ? meta.size : listed.size;
    if (size < 0) fail("{}: the Hub did not say the file's size, so it cannot be verified", what);
    blob.size = static_cast<uint64_t>(size);
    blob.sha256 = listed.sha256;
    if (meta.lfs && meta.etag.size() == 64) {
      if (!blob.sha256.empty() && blob.sha256 != meta.etag) {
        fail("{}: the Hub gives two sha256 values ({} and {})", what, blob.sha256, meta.etag);
      }
      blob.sha256 = meta.etag;
    }
    download_blob(target_, repo_, blob);
    repo_.link_snapshot_file(commit, name, blob.etag);
  }

 private:
  const HubTarget& target_;
  const HubCacheRepo& repo_;
  const HubRepoInfo& info_;
  std::map<std::string, const HubRepoFile*> files_;
};

std::string download_snapshot(const HubRequest& request, const HubSettings& settings,
                              const HubCacheRepo& repo) {
  const HubTarget target{&settings, request.path_or_id, request.revision,
                         request.context + " " + request.path_or_id};
  const HubRepoInfo info = fetch_repo_info(target);
  Fetcher fetcher(target, repo, info);
  std::vector<std::string> wanted = hub_file_names(request.files);
  for (const std::string& name : wanted) {
    if (fetcher.in_repo(name)) fetcher.fetch(name);
  }
  if (request.files == HubFiles::kModel && fetcher.in_repo(kIndex)) {
    for (const std::string& shard :
         index_shards(repo.snapshot_file(info.commit, kIndex), target.context)) {
      if (!fetcher.in_repo(shard)) {
        fail("{}: its {} names {}, which the repository does not have at {}", target.context,
             kIndex, shard, info.commit);
      }
      fetcher.fetch(shard);
    }
  }
  // What the repo lacks is recorded, so the next run finds the snapshot complete offline.
  for (const std::string& name : wanted) {
    if (!fetcher.in_repo(name)) repo.mark_missing(info.commit, name);
  }
  repo.write_ref(request.revision, info.commit);
  return repo.snapshot_dir(info.commit);
}

}  // namespace

std::vector<std::string> hub_file_names(HubFiles files) {
  std::vector<std::string> names = {
      "config.json",           "generation_config.json",  "tokenizer.json",
      "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
      "chat_template.json"};
  if (files == HubFiles::kModel) {
    names.push_back(kIndex);
    names.push_back(kSingleWeights);
  }
  return names;
}

std::string resolve_hub_path(const HubRequest& request) {
  std::error_code ec;
  if (fs::exists(request.path_or_id, ec) || !looks_like_hub_id(request.path_or_id)) {
    return request.path_or_id;
  }
  return resolve_hub_path(request, hub_settings_from_env());
}

std::string resolve_hub_path(const HubRequest& request, const HubSettings& settings) {
  std::error_code ec;
  if (fs::exists(request.path_or_id, ec) || !looks_like_hub_id(request.path_or_id)) {
    return request.path_or_id;
  }
  check_revision(request.revision, request.context + " " + request.path_or_id + ": the revision");
  const HubCacheRepo repo(settings.cache_dir, request.path_or_id);
  if (std::optional<std::string> cached = complete_snapshot(repo, request)) return *cached;
  if (settings.offline) {
    fail(
        "{} {}: HF_HUB_OFFLINE is set and the cache at {} has no complete copy of revision "
        "'{}'; HINT: run once with network access (unset HF_HUB_OFFLINE), or give a local "
        "directory",
        request.context, request.path_or_id, settings.cache_dir, request.revision);
  }
  // One process per node talks to the Hub; the others wait here and then find it cached.
  const FileLock lock((fs::path(repo.locks_dir()) / "shardtrain-resolve.lock").string(),
                      kHubLockHint,
                      "hub: another process is fetching " + request.path_or_id + "; waiting");
  if (std::optional<std::string> cached = complete_snapshot(repo, request)) return *cached;
  return download_snapshot(request, settings, repo);
}

}  // namespace shardtrain
