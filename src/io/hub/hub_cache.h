// The Hugging Face Hub cache, laid out exactly as huggingface_hub lays it out, so that Python
// tools (transformers, `hf cache scan`) and shardtrain share the files:
//
//   <cache>/models--<org>--<name>/refs/<revision>            the commit a branch or tag names
//   <cache>/models--<org>--<name>/snapshots/<commit>/<file>  relative symlink into blobs/
//   <cache>/models--<org>--<name>/blobs/<etag>               the file's bytes (etag = sha256 for
//                                                            LFS files, the git blob id else)
//   <cache>/models--<org>--<name>/blobs/<etag>.incomplete    a download in progress (resumable)
//   <cache>/models--<org>--<name>/.no_exist/<commit>/<file>  "the repo has no such file"
//   <cache>/.locks/models--<org>--<name>/<etag>.lock         one downloader per blob
//
// Also the checks on what names a user or a server can give: a repo id ("org/name", the
// characters huggingface_hub allows, at most 96), a revision (a branch, tag or 40-hex commit;
// no "..", no leading '/'), a repo file name (relative, no ".." component), an etag (the
// characters a hash has). Each refusal throws Error naming the value.
#pragma once

#include <optional>
#include <string>

namespace shardtrain {

// What to do when a file in the cache cannot be written (a lock, a blob, a snapshot link).
inline constexpr const char* kHubLockHint =
    "make the Hugging Face cache writable or set HF_HUB_CACHE to a writable directory";

// True when `text` has the shape of a Hub model id "org/name" (exactly one '/', allowed
// characters, not starting with '.', '/' or '~'). Says nothing about whether it exists.
bool looks_like_hub_id(const std::string& text);
bool is_commit_hash(const std::string& text);  // 40 lowercase hex digits

// Throw Error (naming `what`, e.g. "model.revision") when the value is not acceptable.
void check_revision(const std::string& revision, const std::string& what);
void check_repo_file_name(const std::string& name, const std::string& what);
void check_etag(const std::string& etag, const std::string& what);

class HubCacheRepo {
 public:
  // REQUIRES: looks_like_hub_id(repo_id).
  HubCacheRepo(std::string cache_dir, std::string repo_id);

  const std::string& repo_id() const { return repo_id_; }
  const std::string& dir() const { return dir_; }  // <cache>/models--org--name
  std::string snapshot_dir(const std::string& commit) const;
  std::string snapshot_file(const std::string& commit, const std::string& file) const;
  std::string blob_path(const std::string& etag) const;
  std::string locks_dir() const;  // <cache>/.locks/models--org--name

  // The commit `revision` names in this cache: the revision itself when it is a commit hash,
  // else the content of refs/<revision> when that is a commit hash; nullopt otherwise.
  std::optional<std::string> cached_commit(const std::string& revision) const;
  // True when the snapshot has `file` (a link that resolves to an existing blob).
  bool has_file(const std::string& commit, const std::string& file) const;
  bool marked_missing(const std::string& commit, const std::string& file) const;

  // Writers (each atomic: a reader sees the old state or the new one). Throw Error naming the
  // path when the cache cannot be written.
  void write_ref(const std::string& revision, const std::string& commit) const;
  void link_snapshot_file(const std::string& commit, const std::string& file,
                          const std::string& etag) const;
  void mark_missing(const std::string& commit, const std::string& file) const;

 private:
  std::string cache_dir_;
  std::string repo_id_;
  std::string dir_;
};

}  // namespace shardtrain
