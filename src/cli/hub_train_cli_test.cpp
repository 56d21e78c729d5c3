// `shardtrain` with models named by Hub id, end to end against the fake Hub
// (tests/hub/fake_hub.py on loopback): `train --model.path Org/Tiny` downloads the tiny model
// into a Hugging Face cache and trains on it (the same losses as from the local directory it was
// made from), then trains again with HF_HUB_OFFLINE=1 and the server gone, from the cache; the
// commands that take a model or tokenizer (eval --model, generate --model, prepare and export
// --tokenizer, plan) accept ids too. Every bad input ends in one error line and exit code 2
// with nothing half-written left in the cache: an unknown id, a gated model without a token, a
// missing revision, offline with nothing cached, an unsupported model_type in the downloaded
// config.json, a full disk (a file size limit) during the download.
//
// SHARDTRAIN_HUB_CACHE_OUT=DIR keeps the cache of TrainsFromTheFakeHubThenOffline in DIR, for
// tools/device/check_hub_cache.py (huggingface_hub reads what we wrote).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include "core/testing/test_support.h"
#include "io/hub/testing/fake_hub.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;
using testing::CommandResult;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string first_loss_line(const std::string& output) {
  std::smatch match;
  return std::regex_search(output, match, std::regex("first loss [0-9.]+, last loss [0-9.]+"))
             ? match.str()
             : "<no loss line>";
}

class HubTrainCliTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    testing::make_fake_hub_repos(path("repos"));
    hub_.emplace(testing::fake_hub_repo_specs(path("repos")), dir_.string());
    const char* keep = std::getenv("SHARDTRAIN_HUB_CACHE_OUT");
    cache_ = keep != nullptr && *keep != '\0' ? std::string(keep) : path("cache");
    testing::write_random_sequences(path("data.jsonl"), 24, 5, 96);
    write("job.toml", "[data]\npath = \"" + path("data.jsonl") +
                          "\"\nseq_len = 16\n[train]\nsteps = 2\nmicro_batch = 2\nseed = 3\n"
                          "device = \"cpu\"\nlog_every = 1\n[model]\ndtype = \"fp32\"\n");
  }

  // Runs the binary with the Hub's variables pointing at the fake Hub and the test's cache.
  CommandResult run(const std::string& args, const std::string& extra_env = "") const {
    // HF_HOME of the test's own: no token file of the machine's user is read.
    return testing::run_command(
        "env -u HF_TOKEN -u HF_TOKEN_PATH -u HF_HUB_OFFLINE -u TRANSFORMERS_OFFLINE HF_HOME=" +
        path("hf_home") + " HF_ENDPOINT=" + hub_->endpoint() + " HF_HUB_CACHE=" + cache_ + " " +
        extra_env + " timeout -s KILL 120 " + testing::kBinary + " " + args);
  }
  CommandResult train(const std::string& model, const std::string& extra = "",
                      const std::string& env = "") const {
    return run("train --config " + path("job.toml") + " --model.path " + model + " " + extra, env);
  }
  // The single error line of a failed run (and that it is the only one).
  static std::string the_error(const CommandResult& r) {
    EXPECT_EQ(r.exit_code, 2) << r.output;
    const std::vector<std::string> errors = r.error_lines();
    EXPECT_EQ(errors.size(), 1u) << r.output;
    return errors.empty() ? "" : errors.front();
  }
  std::set<std::string> cache_tree() const {
    std::set<std::string> out;
    std::error_code ec;
    if (!fs::exists(cache_, ec)) return out;
    for (const auto& entry : fs::recursive_directory_iterator(cache_))
      out.insert(fs::relative(entry.path(), cache_).string());
    return out;
  }

  std::optional<testing::FakeHub> hub_;
  std::string cache_;
};

TEST_F(HubTrainCliTest, TrainsFromTheFakeHubThenOffline) {
  const CommandResult local = train(testing::kGolden + "llama_gqa");
  ASSERT_EQ(local.exit_code, 0) << local.output;
  const CommandResult online = train("Org/Tiny");
  ASSERT_EQ(online.exit_code, 0) << online.output;
  EXPECT_EQ(first_loss_line(online.output), first_loss_line(local.output));
  EXPECT_TRUE(contains(online.output, "hub: Org/Tiny model.safetensors")) << online.output;
  EXPECT_TRUE(contains(online.output, "339.3 KiB / 339.3 KiB (100.0%)")) << online.output;
  EXPECT_EQ(hub_->count({"cdn GET /blobs/"}), 1);

  hub_->stop();
  const CommandResult offline = train("Org/Tiny", "", "HF_HUB_OFFLINE=1");
  ASSERT_EQ(offline.exit_code, 0) << offline.output;
  EXPECT_EQ(first_loss_line(offline.output), first_loss_line(local.output));
  EXPECT_FALSE(contains(offline.output, "hub:")) << offline.output;
  // plan reads the model's config.json from the cache too.
  const CommandResult plan =
      run("plan --config " + path("job.toml") + " --model.path Org/Tiny", "HF_HUB_OFFLINE=1");
  EXPECT_EQ(plan.exit_code, 0) << plan.output;
}

TEST_F(HubTrainCliTest, EvalGeneratePrepareAndExportTakeHubIds) {
  const CommandResult eval =
      run("eval --model Org/Tiny --data " + path("data.jsonl") + " --seq-len 16 --device cpu");
  EXPECT_EQ(eval.exit_code, 0) << eval.output;
  EXPECT_TRUE(contains(eval.output, "loss")) << eval.output;
  write("text.jsonl", "{\"text\": \"hello world, hello hub\"}\n");
  const CommandResult prepare = run("prepare --tokenizer Org/Demo --data " + path("text.jsonl") +
                                    " --seq-len 8 --out " + path("prepared.bin"));
  EXPECT_EQ(prepare.exit_code, 0) << prepare.output;
  EXPECT_TRUE(fs::exists(path("prepared.bin"))) << prepare.output;
  // --revision picks the tokenizer's revision (a tag here), as model.revision does the model's.
  const CommandResult tagged = run("prepare --tokenizer Org/Demo --revision v1 --data " +
                                   path("text.jsonl") + " --seq-len 8 --out " + path("tagged.bin"));
  EXPECT_EQ(tagged.exit_code, 0) << tagged.output;
  EXPECT_EQ(testing::read_text(path("tagged.bin")), testing::read_text(path("prepared.bin")));
  // The tokenizer set leaves the weights out.
  EXPECT_EQ(hub_->count({"cdn GET"}), 1);  // eval's weights only
}

TEST_F(HubTrainCliTest, BadInputsEndInOneLineAndExitCode2) {
  const std::string unknown = the_error(train("Org/NoSuchModel"));
  EXPECT_TRUE(contains(unknown,
                       "model.path Org/NoSuchModel: no local directory of that name, "
                       "and the Hub at " +
                           hub_->endpoint() + " has no model"))
      << unknown;
  const std::string gated = the_error(train("Org/Gated"));
  EXPECT_TRUE(contains(gated, "Org/Gated is a gated model (HTTP 401); HINT: set HF_TOKEN"))
      << gated;
  EXPECT_TRUE(contains(gated, hub_->endpoint() + "/Org/Gated")) << gated;
  const CommandResult with_token = train("Org/Gated", "", "HF_TOKEN=" + testing::kFakeHubToken);
  EXPECT_EQ(with_token.exit_code, 0) << with_token.output;
  const std::string revision = the_error(train("Org/Tiny", "--model.revision v9"));
  EXPECT_TRUE(contains(revision, "Org/Tiny has no revision 'v9'")) << revision;
  const std::string prepare_revision =
      the_error(run("prepare --tokenizer Org/Demo --revision v9 --data " + path("data.jsonl") +
                    " --seq-len 8 --out " + path("never.bin")));
  EXPECT_TRUE(contains(prepare_revision, "Org/Demo has no revision 'v9'")) << prepare_revision;
  EXPECT_FALSE(fs::exists(path("never.bin")));
  const std::string export_revision = the_error(run(
      "export " + path("no_checkpoint") + " --out " + path("x") +
      " --tokenizer Org/Demo --revision v9"));
  EXPECT_TRUE(contains(export_revision, "Org/Demo has no revision 'v9'")) << export_revision;
  const std::string offline = the_error(train("Org/Sharded", "", "HF_HUB_OFFLINE=1"));
  EXPECT_TRUE(contains(offline, "HF_HUB_OFFLINE is set and the cache at " + cache_)) << offline;
  const std::string bad_flag = the_error(train("Org/Tiny", "", "HF_HUB_OFFLINE=perhaps"));
  EXPECT_TRUE(contains(bad_flag, "HF_HUB_OFFLINE=perhaps: not a yes/no value")) << bad_flag;
  const std::string bert = the_error(train("Org/Bert"));
  EXPECT_TRUE(contains(bert, "bert")) << bert;
  EXPECT_TRUE(contains(bert, "llama")) << bert;  // the supported ones are named
  for (const std::string& p : cache_tree()) EXPECT_FALSE(contains(p, ".incomplete")) << p;
}

TEST_F(HubTrainCliTest, FullDiskDuringTheDownloadKeepsOnlyAResumablePart) {
  // 200 KiB: config.json fits, the 339 KiB weights do not.
  const CommandResult full = run("train --config " + path("job.toml") + " --model.path Org/Tiny",
                                 "bash -c 'ulimit -f 200; exec \"$0\" \"$@\"'");
  const std::string error = the_error(full);
  EXPECT_TRUE(contains(error, "cannot write")) << error;
  EXPECT_TRUE(contains(error, "File too large")) << error;
  EXPECT_TRUE(contains(error, "HF_HUB_CACHE")) << error;
  int incomplete = 0;
  for (const std::string& p : cache_tree()) {
    incomplete += contains(p, ".incomplete");
    EXPECT_FALSE(contains(p, "snapshots/") && contains(p, "model.safetensors")) << p;
  }
  EXPECT_EQ(incomplete, 1);
  // With room again the next run resumes where the limit stopped it.
  const CommandResult resumed = train("Org/Tiny");
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(hub_->count({"cdn GET /blobs/", "bytes=204800-"}), 1);
}

}  // namespace
}  // namespace shardtrain
