// The Hub client against the fake Hub (tests/hub/fake_hub.py, two loopback servers: the Hub and
// a "CDN" the weights are redirected to), in process. Checked: the cache it writes has
// huggingface_hub's layout (refs, relative snapshot links into blobs named by ETag, .no_exist
// markers, no temporaries left); a second resolution and an offline one use the cache without
// a request; a sharded model fetches exactly the shards its index lists; a dropped connection is
// resumed with a Range request, as is a .incomplete left by an earlier run; concurrent
// resolutions download each file once; and each bad input is one Error that says what to do,
// with nothing half-written left in the cache: an unknown id, a gated model without or with a
// wrong token, a missing revision, a corrupt download, more bytes than announced, offline with
// nothing cached, a bad revision name, bad HF_* variables.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "core/error.h"
#include "core/testing/test_support.h"
#include "io/hub/hub_cache.h"
#include "io/hub/hub_download.h"
#include "io/hub/hub_progress.h"
#include "io/hub/hub_resolver.h"
#include "io/hub/hub_settings.h"
#include "io/hub/testing/fake_hub.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;
using testing::error_of;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Every path under `dir` (relative), for checking what a failure left behind.
std::set<std::string> tree(const std::string& dir) {
  std::set<std::string> out;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return out;
  for (const auto& entry : fs::recursive_directory_iterator(dir))
    out.insert(fs::relative(entry.path(), dir).string());
  return out;
}

bool any_temporary(const std::string& dir) {
  for (const std::string& path : tree(dir)) {
    if (contains(path, ".incomplete") || contains(path, ".tmp")) return true;
  }
  return false;
}

// One fake Hub serves the whole suite (starting Python is the slow part); each test gets a fresh
// cache, no faults and an empty request log. A test that stops the server gets a new one next.
class HubResolverTest : public testing::TempDirTest {
 protected:
  static void SetUpTestSuite() {
    repos_.emplace("shardtrain_hub_repos_");
    testing::make_fake_hub_repos(repos_->path());
  }
  static void TearDownTestSuite() {
    hub_.reset();
    repos_.reset();
  }
  void SetUp() override {
    TempDirTest::SetUp();
    if (!hub_ || !hub_->running()) {
      hub_.reset();
      hub_.emplace(testing::fake_hub_repo_specs(repos_->path()), repos_->path());
    }
    hub_->set_faults(nlohmann::json::object());
    hub_->clear_log();
    settings_.endpoint = hub_->endpoint();
    settings_.cache_dir = path("cache");
  }
  static std::string repos(const std::string& name) { return repos_->path() + "/" + name; }

  std::string resolve(const std::string& id, HubFiles files = HubFiles::kModel,
                      const std::string& revision = "main") const {
    return resolve_hub_path({id, revision, files, "model.path"}, settings_);
  }
  std::string repo_dir(const std::string& name) const { return path("cache/models--Org--" + name); }

  static inline std::optional<testing::TempDir> repos_;
  static inline std::optional<testing::FakeHub> hub_;
  HubSettings settings_;
};

TEST_F(HubResolverTest, WritesHuggingfaceHubsCacheLayout) {
  const std::string snapshot = resolve("Org/Tiny");
  const std::string commit = testing::read_existing(repo_dir("Tiny") + "/refs/main");
  ASSERT_TRUE(is_commit_hash(commit)) << commit;
  EXPECT_EQ(snapshot, repo_dir("Tiny") + "/snapshots/" + commit);
  // Relative links into blobs/ named by ETag: the sha256 for the LFS weights, the git blob id
  // (sha1 of "blob <size>\0" + bytes) for config.json.
  const fs::path weights_link = fs::read_symlink(snapshot + "/model.safetensors");
  EXPECT_EQ(weights_link.string(),
            "../../blobs/" + file_sha256(repos("tiny") + "/model.safetensors"));
  EXPECT_EQ(fs::read_symlink(snapshot + "/config.json").parent_path().string(), "../../blobs");
  EXPECT_EQ(testing::read_existing(snapshot + "/model.safetensors"),
            testing::read_existing(repos("tiny") + "/model.safetensors"));
  EXPECT_EQ(testing::read_existing(snapshot + "/config.json"),
            testing::read_existing(repos("tiny") + "/config.json"));
  // The files training could use that the repo lacks are recorded as absent.
  EXPECT_TRUE(fs::exists(repo_dir("Tiny") + "/.no_exist/" + commit + "/tokenizer.json"));
  EXPECT_TRUE(
      fs::exists(repo_dir("Tiny") + "/.no_exist/" + commit + "/model.safetensors.index.json"));
  EXPECT_TRUE(fs::exists(path("cache/.locks/models--Org--Tiny")));
  EXPECT_FALSE(any_temporary(path("cache")));
  // The weights went through the CDN (the redirect), not the Hub.
  EXPECT_EQ(hub_->count({"cdn GET /blobs/"}), 1);
  EXPECT_EQ(hub_->count({"hub GET /Org/Tiny/resolve/"}), 1);  // config.json only
}

TEST_F(HubResolverTest, ACompleteSnapshotIsUsedWithoutTheNetworkAndOffline) {
  const std::string first = resolve("Org/Tiny");
  hub_->clear_log();
  EXPECT_EQ(resolve("Org/Tiny"), first);
  hub_->stop();  // nothing to reach now
  settings_.offline = true;
  EXPECT_EQ(resolve("Org/Tiny"), first);
  const std::string commit = fs::path(first).filename().string();
  EXPECT_EQ(resolve("Org/Tiny", HubFiles::kModel, commit), first);  // by commit, no ref needed
  EXPECT_TRUE(hub_->log_lines().empty());
}

TEST_F(HubResolverTest, ATagResolvesToItsCommitAndGetsItsOwnRef) {
  const std::string by_main = resolve("Org/Tiny");
  EXPECT_EQ(resolve("Org/Tiny", HubFiles::kModel, "v1"), by_main);
  EXPECT_EQ(testing::read_existing(repo_dir("Tiny") + "/refs/v1"), fs::path(by_main).filename());
}

TEST_F(HubResolverTest, ShardedModelFetchesTheShardsItsIndexLists) {
  const std::string snapshot = resolve("Org/Sharded");
  for (const char* shard :
       {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}) {
    EXPECT_EQ(testing::read_existing(snapshot + "/" + shard),
              testing::read_existing(repos("sharded") + "/" + shard));
  }
  EXPECT_EQ(hub_->count({"cdn GET /blobs/"}), 2);  // shard 1 once, though listed twice
  EXPECT_FALSE(fs::exists(snapshot + "/model.safetensors"));
}

TEST_F(HubResolverTest, TokenizerSetLeavesTheWeightsOut) {
  const std::string snapshot = resolve("Org/Tiny", HubFiles::kConfigAndTokenizer);
  EXPECT_TRUE(fs::exists(snapshot + "/config.json"));
  EXPECT_FALSE(fs::exists(snapshot + "/model.safetensors"));
  EXPECT_EQ(hub_->count({"cdn GET"}), 0);
  const std::string demo = resolve("Org/Demo", HubFiles::kConfigAndTokenizer);
  EXPECT_EQ(testing::read_existing(demo + "/tokenizer.json"),
            testing::read_existing(repos("demo") + "/tokenizer.json"));
}

TEST_F(HubResolverTest, DroppedConnectionIsResumedWithARangeRequest) {
  hub_->set_faults({{"drop_once", {"model.safetensors"}}});
  const std::string snapshot = resolve("Org/Tiny");
  EXPECT_EQ(testing::read_existing(snapshot + "/model.safetensors"),
            testing::read_existing(repos("tiny") + "/model.safetensors"));
  EXPECT_EQ(hub_->count({"cdn GET /blobs/", " - "}), 1);  // the first attempt, cut in half
  EXPECT_EQ(hub_->count({"cdn GET /blobs/", "bytes=173740-"}), 1)
      << testing::read_text(repos_->path() + "/fake_hub.log");
  EXPECT_FALSE(any_temporary(path("cache")));
}

TEST_F(HubResolverTest, AnIncompleteBlobFromAnEarlierRunIsResumed) {
  const std::string bytes = testing::read_existing(repos("tiny") + "/model.safetensors");
  const std::string sha = file_sha256(repos("tiny") + "/model.safetensors");
  fs::create_directories(repo_dir("Tiny") + "/blobs");
  std::ofstream(repo_dir("Tiny") + "/blobs/" + sha + ".incomplete", std::ios::binary)
      << bytes.substr(0, 1000);
  const std::string snapshot = resolve("Org/Tiny");
  EXPECT_EQ(testing::read_existing(snapshot + "/model.safetensors"), bytes);
  EXPECT_EQ(hub_->count({"cdn GET /blobs/", "bytes=1000-"}), 1);
  EXPECT_EQ(hub_->count({"cdn GET /blobs/"}), 1);
}

TEST_F(HubResolverTest, ConcurrentResolutionsDownloadEachFileOnce) {
  std::vector<std::string> results(4);
  testing::run_threads(4, [&](int rank) { results[rank] = resolve("Org/Sharded"); });
  for (const std::string& result : results) EXPECT_EQ(result, results[0]);
  EXPECT_EQ(hub_->count({"cdn GET /blobs/"}), 2);
  EXPECT_EQ(hub_->count({"hub GET /api/models/Org/Sharded"}), 1);
}

TEST_F(HubResolverTest, CorruptDownloadIsRemovedAndNotUsed) {
  hub_->set_faults({{"corrupt", {"model.safetensors"}}});
  const std::string error = error_of([&] { resolve("Org/Tiny"); });
  EXPECT_TRUE(contains(error, "model.path Org/Tiny: the download of model.safetensors is corrupt"))
      << error;
  EXPECT_TRUE(contains(error, "removed and not used")) << error;
  EXPECT_FALSE(any_temporary(path("cache")));
  EXPECT_FALSE(
      fs::exists(repo_dir("Tiny") + "/blobs/" + file_sha256(repos("tiny") + "/model.safetensors")));
  for (const std::string& p : tree(repo_dir("Tiny")))
    EXPECT_FALSE(contains(p, "snapshots/") && contains(p, "model.safetensors")) << p;
  // The next run, with the server fixed, completes.
  hub_->set_faults(nlohmann::json::object());
  EXPECT_TRUE(fs::exists(resolve("Org/Tiny") + "/model.safetensors"));
}

TEST_F(HubResolverTest, MoreBytesThanAnnouncedIsAnError) {
  hub_->set_faults({{"oversize", {"model.safetensors"}}});
  const std::string error = error_of([&] { resolve("Org/Tiny"); });
  EXPECT_TRUE(contains(error, "sent more than the 347480 bytes the Hub announced")) << error;
  EXPECT_FALSE(any_temporary(path("cache")));
}

TEST_F(HubResolverTest, UnknownIdSaysSo) {
  const std::string error = error_of([&] { resolve("Org/NoSuchModel"); });
  EXPECT_TRUE(contains(error,
                       "model.path Org/NoSuchModel: no local directory of that name, and "
                       "the Hub at " +
                           hub_->endpoint() + " has no model Org/NoSuchModel"))
      << error;
  EXPECT_TRUE(tree(repo_dir("NoSuchModel")).empty());
}

TEST_F(HubResolverTest, GatedModelNeedsAToken) {
  const std::string anonymous = error_of([&] { resolve("Org/Gated"); });
  EXPECT_TRUE(contains(anonymous, "Org/Gated is a gated model (HTTP 401)")) << anonymous;
  EXPECT_TRUE(contains(anonymous, "set HF_TOKEN")) << anonymous;
  EXPECT_TRUE(contains(anonymous, "accepted its licence at " + hub_->endpoint() + "/Org/Gated"))
      << anonymous;
  settings_.token = "hf_wrong";
  settings_.token_source = "HF_TOKEN";
  const std::string wrong = error_of([&] { resolve("Org/Gated"); });
  EXPECT_TRUE(contains(wrong, "the token from HF_TOKEN has no access yet (HTTP 403)")) << wrong;
  settings_.token = testing::kFakeHubToken;
  EXPECT_TRUE(fs::exists(resolve("Org/Gated") + "/model.safetensors"));
  // The token goes to the Hub, never to the CDN host.
  EXPECT_EQ(hub_->count({"cdn GET", "auth"}), 0);
  EXPECT_GE(hub_->count({"hub HEAD /Org/Gated/", "auth"}), 2);
}

TEST_F(HubResolverTest, MissingRevisionSaysSo) {
  const std::string error = error_of([&] { resolve("Org/Tiny", HubFiles::kModel, "v9"); });
  EXPECT_TRUE(contains(error, "Org/Tiny has no revision 'v9' (HTTP 404)")) << error;
  EXPECT_TRUE(tree(repo_dir("Tiny")).empty());
  const std::string bad_name = error_of([&] { resolve("Org/Tiny", HubFiles::kModel, "../x"); });
  EXPECT_TRUE(contains(bad_name, "is not a branch, tag or commit name")) << bad_name;
}

TEST_F(HubResolverTest, OfflineWithNothingCachedSaysSo) {
  settings_.offline = true;
  const std::string error = error_of([&] { resolve("Org/Tiny"); });
  EXPECT_TRUE(contains(error, "HF_HUB_OFFLINE is set and the cache at " + path("cache") +
                                  " has no complete copy of revision 'main'"))
      << error;
  EXPECT_TRUE(hub_->log_lines().empty());
}

TEST_F(HubResolverTest, UnreachableHubNamesTheEndpoint) {
  hub_->stop();
  const std::string error = error_of([&] { resolve("Org/Tiny"); });
  EXPECT_TRUE(contains(error,
                       "model.path Org/Tiny: no local directory of that name, and cannot reach "
                       "the Hugging Face Hub at " +
                           hub_->endpoint()))
      << error;
  EXPECT_TRUE(contains(error, "HF_HUB_OFFLINE=1")) << error;
}

TEST_F(HubResolverTest, LocalDirectoriesAndNonIdsAreLeftAlone) {
  EXPECT_EQ(resolve(repos("tiny")), repos("tiny"));
  EXPECT_EQ(resolve("not an id"), "not an id");
  EXPECT_EQ(resolve("a/b/c"), "a/b/c");
  EXPECT_TRUE(hub_->log_lines().empty());
}

TEST(HubSettingsTest, FollowsHuggingfaceHubsVariables) {
  using Env = std::map<std::string, std::string>;
  const auto settings = [](const Env& env) {
    return hub_settings_from_env([env](const std::string& name) -> std::optional<std::string> {
      const auto it = env.find(name);
      if (it == env.end()) return std::nullopt;
      return it->second;
    });
  };
  EXPECT_EQ(settings({{"HOME", "/h"}}).cache_dir, "/h/.cache/huggingface/hub");
  EXPECT_EQ(settings({{"HOME", "/h"}}).endpoint, "https://huggingface.co");
  EXPECT_EQ(settings({{"HOME", "/h"}, {"HF_HOME", "/hf"}}).cache_dir, "/hf/hub");
  EXPECT_EQ(settings({{"HF_HOME", "/hf"}, {"HF_HUB_CACHE", "/c"}}).cache_dir, "/c");
  EXPECT_EQ(settings({{"HOME", "/h"}, {"HF_ENDPOINT", "http://mirror:8080/"}}).endpoint,
            "http://mirror:8080");
  EXPECT_TRUE(settings({{"HOME", "/h"}, {"HF_HUB_OFFLINE", "1"}}).offline);
  EXPECT_TRUE(settings({{"HOME", "/h"}, {"TRANSFORMERS_OFFLINE", "yes"}}).offline);
  EXPECT_FALSE(settings({{"HOME", "/h"}, {"HF_HUB_OFFLINE", "0"}}).offline);
  const HubSettings with_token = settings({{"HOME", "/h"}, {"HF_TOKEN", " hf_abc\n"}});
  EXPECT_EQ(with_token.token, "hf_abc");
  EXPECT_EQ(with_token.token_source, "HF_TOKEN");

  testing::TempDir home("shardtrain_hub_home_");
  std::ofstream(home.path() + "/token") << "hf_from_file\n";
  const HubSettings from_file = settings({{"HF_HOME", home.path()}});
  EXPECT_EQ(from_file.token, "hf_from_file");
  EXPECT_EQ(from_file.token_source, home.path() + "/token");

  EXPECT_TRUE(contains(error_of([&] {
                         settings({{"HOME", "/h"}, {"HF_HUB_OFFLINE", "maybe"}});
                       }),
                       "HF_HUB_OFFLINE=maybe: not a yes/no value"));
  EXPECT_TRUE(contains(error_of([&] {
                         settings({{"HOME", "/h"}, {"HF_ENDPOINT", "mirror"}});
                       }),
                       "HF_ENDPOINT=mirror: not an http:// or https:// URL"));
  EXPECT_TRUE(contains(error_of([&] {
                         settings({{"HOME", "/h"}, {"HF_TOKEN", "hf_a\r\nX: y"}});
                       }),
                       "the Hugging Face token from HF_TOKEN contains spaces or control"));
  EXPECT_TRUE(contains(error_of([&] { settings({}); }), "cannot locate the Hugging Face cache"));
}

TEST(HubProgressTest, LinesHaveBytesRateAndEta) {
  std::vector<std::string> lines;
  double now = 100.0;
  HubProgress progress(
      "Org/X model.safetensors", 10u << 20, 2u << 20, 2.0,
      [&](const std::string& line) { lines.push_back(line); }, [&] { return now; });
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "hub: Org/X model.safetensors  2.0 MiB / 10.0 MiB (20.0%) (resumed)");
  now = 101.0;
  progress.advance(1u << 20);  // within the interval: no line
  EXPECT_EQ(lines.size(), 1u);
  now = 104.0;
  progress.advance(3u << 20);  // 4 MiB in 4 s, 4 MiB left
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1],
            "hub: Org/X model.safetensors  6.0 MiB / 10.0 MiB (60.0%) at 1.0 MiB/s | ETA 0:00:04");
  progress.advance(4u << 20);
  progress.finish();
  EXPECT_EQ(lines.back(),
            "hub: Org/X model.safetensors  10.0 MiB / 10.0 MiB (100.0%) at 2.0 MiB/s done");
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(3u << 30), "3.0 GiB");
}

TEST(HubCacheTest, IdsRevisionsAndFileNames) {
  EXPECT_TRUE(looks_like_hub_id("meta-llama/Llama-3.2-1B"));
  EXPECT_TRUE(looks_like_hub_id("Qwen/Qwen3-0.6B"));
  EXPECT_FALSE(looks_like_hub_id("gpt2"));        // no org: taken as a path
  EXPECT_FALSE(looks_like_hub_id("./org/name"));  // explicit paths stay paths
  EXPECT_FALSE(looks_like_hub_id("/org/name"));
  EXPECT_FALSE(looks_like_hub_id("org/na--me"));
  EXPECT_FALSE(looks_like_hub_id("org/../name"));
  EXPECT_FALSE(looks_like_hub_id("org/" + std::string(100, 'a')));
  EXPECT_EQ(HubCacheRepo("/c", "Org/Name").dir(), "/c/models--Org--Name");
  EXPECT_EQ(HubCacheRepo("/c", "Org/Name").locks_dir(), "/c/.locks/models--Org--Name");
  EXPECT_NO_THROW(check_revision("refs/pr/1", "r"));
  EXPECT_FALSE(error_of([] { check_revision("a/../b", "model.revision"); }).empty());
  EXPECT_FALSE(error_of([] { check_repo_file_name("../x.safetensors", "f"); }).empty());
  EXPECT_FALSE(error_of([] { check_repo_file_name("/etc/passwd", "f"); }).empty());
  EXPECT_FALSE(error_of([] { check_etag("abc/../d", "f"); }).empty());
}

// A damaged cache's ref (a FIFO, a huge file, a commit followed by junk) names no commit and is
// read without waiting or reading it whole.
TEST(HubCacheTest, ARefThatIsNotACommitNamesNone) {
  const testing::TempDir cache("shardtrain_hub_cache_");
  const HubCacheRepo repo(cache.path(), "Org/Name");
  fs::create_directories(fs::path(repo.dir()) / "refs");
  const std::string commit(40, 'a');
  std::ofstream(fs::path(repo.dir()) / "refs" / "main", std::ios::binary) << commit;
  EXPECT_EQ(repo.cached_commit("main"), commit);
  ASSERT_EQ(::mkfifo((fs::path(repo.dir()) / "refs" / "fifo").c_str(), 0600), 0);
  EXPECT_EQ(repo.cached_commit("fifo"), std::nullopt);
  std::ofstream(fs::path(repo.dir()) / "refs" / "huge", std::ios::binary)
      << commit << std::string(1 << 20, 'b');
  EXPECT_EQ(repo.cached_commit("huge"), std::nullopt);
}

}  // namespace
}  // namespace shardtrain
