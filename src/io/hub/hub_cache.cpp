#include "io/hub/hub_cache.h"

#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "io/atomic_file.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxRepoIdChars = 96;  // huggingface_hub's limit
constexpr size_t kMaxRevisionChars = 255;
constexpr size_t kMaxFileNameChars = 1024;

bool id_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
}

// One '/'-separated part of an id: allowed characters, not empty, no leading/trailing '-'/'.'.
bool id_part(const std::string& part) {
  if (part.empty() || part == "." || part == "..") return false;
  for (const char c : part)
    if (!id_char(c)) return false;
  return part.front() != '-' && part.front() != '.' && part.back() != '-' && part.back() != '.';
}

void make_dirs(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    fail(
        "cannot create {} in the Hugging Face cache ({}); HINT: make it writable or set "
        "HF_HUB_CACHE to a writable directory",
        dir.string(), ec.message());
  }
}

// A ref's text (a 40-hex commit): at most its first 256 bytes, and only from a regular file (a
// FIFO in a damaged cache would hold the open forever, /dev/zero the read).
std::string read_ref(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return "";
  std::ifstream in(path, std::ios::binary);
  std::string text(256, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  return text.substr(0, text.find('\0'));
}

}  // namespace

bool looks_like_hub_id(const std::string& text) {
  if (text.size() > kMaxRepoIdChars) return false;
  const size_t slash = text.find('/');
  if (slash == std::string::npos || text.find('/', slash + 1) != std::string::npos) return false;
  return id_part(text.substr(0, slash)) && id_part(text.substr(slash + 1)) &&
         text.find("--") == std::string::npos;
}

bool is_commit_hash(const std::string& text) {
  if (text.size() != 40) return false;
  for (const char c : text)
    if (!std::isxdigit(static_cast<unsigned char>(c)) ||
        std::isupper(static_cast<unsigned char>(c)))
      return false;
  return true;
}

void check_revision(const std::string& revision, const std::string& what) {
  bool ok = !revision.empty() && revision.size() <= kMaxRevisionChars && revision.front() != '/' &&
            revision.back() != '/' && revision.find("..") == std::string::npos &&
            revision.find("//") == std::string::npos;
  for (const char c : revision) ok = ok && (id_char(c) || c == '/');
  if (!ok) {
    fail(
        "{} '{}' is not a branch, tag or commit name; HINT: use e.g. main, v1.0 or a 40-digit "
        "commit hash",
        what, revision.substr(0, 80));
  }
}

void check_repo_file_name(const std::string& name, const std::string& what) {
  bool ok = !name.empty() && name.size() <= kMaxFileNameChars && name.front() != '/';
  for (const char c : name) ok = ok && c != '\\' && static_cast<unsigned char>(c) >= 0x20;
  for (const auto& part : fs::path(name)) ok = ok && part != ".." && part != ".";
  if (!ok)
    fail("{}: the file name '{}' is not a relative path inside the repository", what,
         name.substr(0, 80));
}

void check_etag(const std::string& etag, const std::string& what) {
  bool ok = !etag.empty() && etag.size() <= 128;
  for (const char c : etag)
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_');
  if (!ok) fail("{}: the Hub sent an unusable ETag '{}'", what, etag.substr(0, 80));
}

HubCacheRepo::HubCacheRepo(std::string cache_dir, std::string repo_id)
    : cache_dir_(std::move(cache_dir)), repo_id_(std::move(repo_id)) {
  SHARDTRAIN_CHECK(looks_like_hub_id(repo_id_), "not a Hub id: {}", repo_id_);
  std::string folder = "models--" + repo_id_;
  folder.replace(folder.find('/'), 1, "--");
  dir_ = (fs::path(cache_dir_) / folder).string();
}

std::string HubCacheRepo::snapshot_dir(const std::string& commit) const {
  return (fs::path(dir_) / "snapshots" / commit).string();
}
std::string HubCacheRepo::snapshot_file(const std::string& commit, const std::string& file) const {
  return (fs::path(snapshot_dir(commit)) / file).string();
}
std::string HubCacheRepo::blob_path(const std::string& etag) const {
  return (fs::path(dir_) / "blobs" / etag).string();
}
std::string HubCacheRepo::locks_dir() const {
  return (fs::path(cache_dir_) / ".locks" / fs::path(dir_).filename()).string();
}

std::optional<std::string> HubCacheRepo::cached_commit(const std::string& revision) const {
  if (is_commit_hash(revision)) return revision;
  const std::string commit = read_ref((fs::path(dir_) / "refs" / revision).string());
  if (!is_commit_hash(commit)) return std::nullopt;
  return commit;
}

bool HubCacheRepo::has_file(const std::string& commit, const std::string& file) const {
  std::error_code ec;
  return fs::is_regular_file(snapshot_file(commit, file), ec);  // follows the link
}

bool HubCacheRepo::marked_missing(const std::string& commit, const std::string& file) const {
  std::error_code ec;
  return fs::is_regular_file(fs::path(dir_) / ".no_exist" / commit / file, ec);
}

void HubCacheRepo::write_ref(const std::string& revision, const std::string& commit) const {
  if (revision == commit) return;  // huggingface_hub writes no ref for a commit either
  const fs::path ref = fs::path(dir_) / "refs" / revision;
  if (read_ref(ref.string()) == commit) return;
  make_dirs(ref.parent_path());
  write_file_atomically(ref.string(), commit);  // no newline: huggingface_hub reads it verbatim
}

void HubCacheRepo::link_snapshot_file(const std::string& commit, const std::string& file,
                                      const std::string& etag) const {
  const fs::path link = snapshot_file(commit, file);
  make_dirs(link.parent_path());
  // Relative, as huggingface_hub makes them, so a moved cache keeps working.
  const fs::path target = fs::path(blob_path(etag)).lexically_relative(link.parent_path());
  const fs::path temp = link.string() + ".tmp." + std::to_string(::getpid());
  std::error_code ec;
  fs::remove(temp, ec);
  fs::create_symlink(target, temp, ec);
  if (!ec) fs::rename(temp, link, ec);  // replaces an older link atomically
  if (ec) {
    fs::remove(temp);
    fail(
        "cannot link {} to its blob in the Hugging Face cache ({}); HINT: check that the cache "
        "dir is writable and on a filesystem with symlinks",
        link.string(), ec.message());
  }
}

void HubCacheRepo::mark_missing(const std::string& commit, const std::string& file) const {
  const fs::path marker = fs::path(dir_) / ".no_exist" / commit / file;
  std::error_code ec;
  if (fs::exists(marker, ec)) return;
  make_dirs(marker.parent_path());
  write_file_atomically(marker.string(), "", Durability::kVisibleOnly);
}

}  // namespace shardtrain
