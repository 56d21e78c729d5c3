// Config files and overrides as users type them: --key=value, --key value, dashes in keys and
// several --config files layered in order.
#include "cli/config_args.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/testing/test_support.h"
#include "train/train_config.h"

namespace shardtrain::cli {
namespace {

using shardtrain::testing::error_of;

TEST(ConfigAssignments, EqualsAndSpaceSeparatedForms) {
  const std::vector<std::string> got =
      config_assignments({"--train.steps=5", "--optim.lr", "1e-4", "--train.max-grad-norm", "0.5",
                          "--data.path", "a=b.jsonl", "--optim.min_lr", "-1"});
  const std::vector<std::string> want = {"train.steps=5", "optim.lr=1e-4",
                                         "train.max-grad-norm=0.5", "data.path=a=b.jsonl",
                                         "optim.min_lr=-1"};
  EXPECT_EQ(got, want);
}

TEST(ConfigAssignments, AStrayWordOrAMissingValueIsNamed) {
  EXPECT_NE(error_of([] { config_assignments({"steps=5"}); }).find("unexpected argument 'steps=5'"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              config_assignments({"--optim.lr"});
            }).find("config override '--optim.lr' has no value"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              config_assignments({"--optim.lr", "--train.steps=2"});
            }).find("'--optim.lr' has no value"),
            std::string::npos);
}

class LayeredConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("shardtrain_config_args_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    config_.register_config(schema_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }
  std::filesystem::path dir_;
  TrainConfig config_;
  ConfigSchema schema_;
};

TEST_F(LayeredConfigTest, LaterFilesWinAndOverridesWinOverFiles) {
  const std::string base =
      write("base.toml", "[train]\nsteps = 10\nmicro_batch = 2\n[optim]\nlr = 1e-3\n");
  const std::string site = write("site.toml", "[train]\nsteps = 20\n");
  apply_config_args(schema_, {base, site}, {"--optim.lr", "5e-4", "--train.micro-batch=3"});
  EXPECT_EQ(config_.train.steps, 20) << "the later file wins";
  EXPECT_EQ(config_.train.micro_batch, 3) << "the override wins over the files";
  EXPECT_DOUBLE_EQ(config_.optim.lr, 5e-4);
}

TEST_F(LayeredConfigTest, AnUnknownKeyInAnyFileIsNamedWithItsFile) {
  const std::string base = write("base.toml", "[train]\nsteps = 10\n");
  const std::string bad = write("bad.toml", "[train]\nstepz = 20\n");
  const std::string message = error_of([&] { apply_config_args(schema_, {base, bad}, {}); });
  EXPECT_NE(message.find(bad + ":2: unknown key 'train.stepz'; did you mean 'train.steps'?"),
            std::string::npos)
      << message;
}

}  // namespace
}  // namespace shardtrain::cli
