#include "core/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/testing/test_support.h"

namespace shardtrain {
namespace {

// A config struct like a component would declare, with its defaults.
struct Settings {
  int64_t steps = 100;
  double learning_rate = 3e-4;
  double eps = 1e-8;
  bool shuffle = true;
  std::string output_dir = "";
  std::string schedule = "cosine";
  int64_t seq_len = 512;
};

void register_settings(ConfigSchema& schema, Settings& s) {
  schema.add("train.steps", &s.steps, "optimizer steps");
  schema.add("train.learning_rate", &s.learning_rate, "peak learning rate");
  schema.add("train.eps", &s.eps, "Adam epsilon");
  schema.add("train.shuffle", &s.shuffle, "shuffle the data");
  schema.add("train.output_dir", &s.output_dir, "where to save");
  schema.add_choice("train.schedule", &s.schedule, {"cosine", "linear", "constant"},
                    "learning rate schedule");
  schema.add("data.seq_len", &s.seq_len, "tokens per sequence");
}

using testing::error_of;

class ConfigTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    register_settings(schema_, settings_);
  }

  std::string write_file(const std::string& name, const std::string& contents) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << contents;
    return path;
  }

  Settings settings_;
  ConfigSchema schema_;
};

TEST_F(ConfigTest, DefaultsStayWhenFileDoesNotSetThem) {
  schema_.load_toml_file(write_file("a.toml", "[train]\nsteps = 20\n"));
  EXPECT_EQ(settings_.steps, 20);
  EXPECT_DOUBLE_EQ(settings_.learning_rate, 3e-4);
  EXPECT_EQ(settings_.schedule, "cosine");
  EXPECT_EQ(settings_.seq_len, 512);
}

TEST_F(ConfigTest, LoadsEveryType) {
  schema_.load_toml_file(write_file("a.toml", R"(
[train]
steps = 7
learning_rate = 0.5
eps = 3          # integers are accepted for double keys
shuffle = false
output_dir = "out/run 1"
schedule = "linear"
[data]
seq_len = 64
)"));
  EXPECT_EQ(settings_.steps, 7);
  EXPECT_DOUBLE_EQ(settings_.learning_rate, 0.5);
  EXPECT_DOUBLE_EQ(settings_.eps, 3.0);
  EXPECT_FALSE(settings_.shuffle);
  EXPECT_EQ(settings_.output_dir, "out/run 1");
  EXPECT_EQ(settings_.schedule, "linear");
  EXPECT_EQ(settings_.seq_len, 64);
}

TEST_F(ConfigTest, DottedKeysAtTopLevelWork) {
  schema_.load_toml_file(write_file("a.toml", "train.steps = 9\ndata.seq_len = 32\n"));
  EXPECT_EQ(settings_.steps, 9);
  EXPECT_EQ(settings_.seq_len, 32);
}

TEST_F(ConfigTest, UnknownKeySuggestsNearest) {
  const std::string path = write_file("a.toml", "[train]\nsteps = 1\nlerning_rate = 0.1\n");
  const std::string message = error_of([&] { schema_.load_toml_file(path); });
  EXPECT_NE(message.find("config " + path +
                         ":3: unknown key 'train.lerning_rate'; did you "
                         "mean 'train.learning_rate'?"),
            std::string::npos)
      << message;
  EXPECT_EQ(settings_.steps, 100) << "a failed load must change nothing";
}

TEST_F(ConfigTest, UnknownKeyFarFromEverythingHasNoSuggestion) {
  const std::string path = write_file("a.toml", "[train]\nwibblewobble = 1\n");
  const std::string message = error_of([&] { schema_.load_toml_file(path); });
  EXPECT_NE(message.find("unknown key 'train.wibblewobble'"), std::string::npos) << message;
  EXPECT_EQ(message.find("did you mean"), std::string::npos) << message;
}

TEST_F(ConfigTest, KeyUnderWrongSectionSuggestsTheRightOne) {
  const std::string path = write_file("a.toml", "[train]\nseq_len = 5\n");
  const std::string message = error_of([&] { schema_.load_toml_file(path); });
  EXPECT_NE(message.find("did you mean 'data.seq_len'?"), std::string::npos) << message;
}

TEST_F(ConfigTest, UnknownSectionSuggestsNearest) {
  const std::string path = write_file("a.toml", "[trian]\nsteps = 1\n");
  const std::string message = error_of([&] { schema_.load_toml_file(path); });
  EXPECT_NE(message.find("unknown section 'trian'; did you mean 'train'?"), std::string::npos)
      << message;
}

TEST_F(ConfigTest, SectionUsedAsValueIsExplained) {
  const std::string path = write_file("a.toml", "train = 5\n");
  EXPECT_NE(error_of([&] {
              schema_.load_toml_file(path);
            }).find(":1: 'train' is a section, not a value; write [train]"),
            std::string::npos);
  const std::string arrays = write_file("b.toml", "[[train]]\nsteps = 1\n");
  EXPECT_NE(error_of([&] { schema_.load_toml_file(arrays); }).find("'train' is a section"),
            std::string::npos);
}

TEST_F(ConfigTest, WrongTypeNamesKeyAndValue) {
  const std::string path = write_file("a.toml", "[train]\nsteps = \"ten\"\n");
  const std::string message = error_of([&] { schema_.load_toml_file(path); });
  EXPECT_EQ(message, "config " + path +
                         ":2: key 'train.steps' must be an integer, got string "
                         "\"ten\"");
}

TEST_F(ConfigTest, FloatForIntegerKeyIsRejected) {
  const std::string path = write_file("a.toml", "[train]\nsteps = 2.5\n");
  const std::string message = error_of([&] { schema_.load_toml_file(path); });
  EXPECT_NE(message.find("must be an integer, got float 2.5"), std::string::npos) << message;
}

TEST_F(ConfigTest, StringForBoolIsRejected) {
  const std::string path = write_file("a.toml", "[train]\nshuffle = \"yes\"\n");
  const std::string message = error_of([&] { schema_.load_toml_file(path); });
  EXPECT_NE(message.find("key 'train.shuffle' must be true or false, got string \"yes\""),
            std::string::npos)
      << message;
}

TEST_F(ConfigTest, ChoiceOutsideSetListsChoices) {
  const std::string path = write_file("a.toml", "[train]\nschedule = \"cosin\"\n");
  const std::string message = error_of([&] { schema_.load_toml_file(path); });
  EXPECT_NE(message.find("key 'train.schedule' must be one of \"cosine\", \"linear\", "
                         "\"constant\"; got \"cosin\""),
            std::string::npos)
      << message;
}

TEST_F(ConfigTest, SyntaxErrorGivesLineAndColumn) {
  const std::string path = write_file("a.toml", "[train]\nsteps = 1\nlearning_rate = = 2\n");
  const std::string message = error_of([&] { schema_.load_toml_file(path); });
  EXPECT_NE(message.find("config " + path + ":3:"), std::string::npos) << message;
  EXPECT_NE(message.find("TOML syntax error"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << "one line";
}

TEST_F(ConfigTest, MissingFileNamesPath) {
  const std::string path = (dir_ / "nope.toml").string();
  const std::string message = error_of([&] { schema_.load_toml_file(path); });
  EXPECT_NE(message.find("config " + path + ": cannot open file"), std::string::npos) << message;
}

TEST_F(ConfigTest, DirectoryInsteadOfFileIsAnError) {
  const std::string message = error_of([&] { schema_.load_toml_file(dir_.string()); });
  EXPECT_NE(message.find("is a directory"), std::string::npos) << message;
}

TEST_F(ConfigTest, OverridesParsePerType) {
  schema_.apply_override("train.steps=5");
  schema_.apply_override("--train.learning_rate=1e-3");
  schema_.apply_override("train.eps=2");
  schema_.apply_override("train.shuffle=false");
  schema_.apply_override("train.output_dir=runs/a=b");
  schema_.apply_override("train.schedule=\"constant\"");
  EXPECT_EQ(settings_.steps, 5);
  EXPECT_DOUBLE_EQ(settings_.learning_rate, 1e-3);
  EXPECT_DOUBLE_EQ(settings_.eps, 2.0);
  EXPECT_FALSE(settings_.shuffle);
  EXPECT_EQ(settings_.output_dir, "runs/a=b");
  EXPECT_EQ(settings_.schedule, "constant");
  schema_.apply_override("train.output_dir='C:\\raw'");
  EXPECT_EQ(settings_.output_dir, "C:\\raw");
}

TEST_F(ConfigTest, DashesInOverrideKeysReadAsUnderscores) {
  schema_.apply_override("--train.learning-rate=2e-3");
  schema_.apply_override("train.output-dir=runs/b");
  EXPECT_DOUBLE_EQ(settings_.learning_rate, 2e-3);
  EXPECT_EQ(settings_.output_dir, "runs/b");
  const std::string message = error_of([&] { schema_.apply_override("train.lerning-rate=1"); });
  EXPECT_NE(message.find("config override 'train.lerning-rate=1'"), std::string::npos) << message;
  EXPECT_NE(message.find("did you mean 'train.learning_rate'?"), std::string::npos) << message;
}

TEST_F(ConfigTest, TomlTextLoadsLikeAFileAndNamesItsOrigin) {
  schema_.load_toml_text("[train]\nsteps = 11\n", "saved config");
  EXPECT_EQ(settings_.steps, 11);
  const std::string message =
      error_of([&] { schema_.load_toml_text("[train]\nstep = 1\n", "saved config"); });
  EXPECT_NE(message.find("config saved config:2: unknown key 'train.step'"), std::string::npos)
      << message;
}

TEST_F(ConfigTest, NonFiniteNumbersAreRejected) {
  const double before = settings_.learning_rate;
  for (const char* literal : {"inf", "-inf", "nan", "+nan"}) {
    const std::string path =
        write_file("a.toml", std::string("[train]\nlearning_rate = ") + literal + "\n");
    const std::string message = error_of([&] { schema_.load_toml_file(path); });
    EXPECT_NE(message.find("key 'train.learning_rate' must be a finite number"), std::string::npos)
        << literal << ": " << message;
    EXPECT_NE(message.find(path), std::string::npos) << message;
  }
  for (const char* literal : {"inf", "-inf", "nan", "infinity", "1e999"}) {
    const std::string override_text = std::string("train.learning_rate=") + literal;
    const std::string message = error_of([&] { schema_.apply_override(override_text); });
    EXPECT_NE(
        message.find("config override '" + override_text + "': key 'train.learning_rate' must be"),
        std::string::npos)
        << message;
  }
  EXPECT_EQ(settings_.learning_rate, before);
}

TEST_F(ConfigTest, OverrideErrors) {
  EXPECT_EQ(error_of([&] { schema_.apply_override("train.steps=ten"); }),
            "config override 'train.steps=ten': key 'train.steps' must be an integer, got "
            "\"ten\"");
  EXPECT_NE(error_of([&] { schema_.apply_override("train.steps=5.5"); }).find("an integer"),
            std::string::npos);
  EXPECT_NE(error_of([&] { schema_.apply_override("train.steps="); }).find("an integer"),
            std::string::npos);
  EXPECT_NE(error_of([&] { schema_.apply_override("train.shuffle=yes"); }).find("true or false"),
            std::string::npos);
  EXPECT_NE(error_of([&] { schema_.apply_override("train.schedule=step"); }).find("one of"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              schema_.apply_override("train.lerning_rate=1");
            }).find("did you mean 'train.learning_rate'?"),
            std::string::npos);
  EXPECT_NE(
      error_of([&] { schema_.apply_override("train.steps"); }).find("expected section.key=value"),
      std::string::npos);
  EXPECT_NE(error_of([&] { schema_.apply_override("=5"); }).find("expected section.key=value"),
            std::string::npos);
  EXPECT_NE(error_of([&] { schema_.apply_override("train=5"); }).find("is a section"),
            std::string::npos);
  EXPECT_EQ(settings_.steps, 100);
}

TEST_F(ConfigTest, RoundTripRestoresEveryValue) {
  settings_.steps = 12345;
  settings_.learning_rate = 0.1 + 0.2;  // not exactly representable in short decimal
  settings_.eps = 1e-8;
  settings_.shuffle = false;
  settings_.output_dir = "dir with \"quotes\" and \\ and \ttab";
  settings_.schedule = "constant";
  settings_.seq_len = -3;
  const std::string text = schema_.to_toml();
  EXPECT_NE(text.find("# peak learning rate\n"), std::string::npos) << text;
  EXPECT_NE(text.find("(one of \"cosine\", \"linear\", \"constant\")"), std::string::npos);

  Settings loaded;
  ConfigSchema other;
  register_settings(other, loaded);
  other.load_toml_file(write_file("round.toml", text));
  EXPECT_EQ(loaded.steps, settings_.steps);
  EXPECT_EQ(loaded.learning_rate, settings_.learning_rate);  // exact, not approximate
  EXPECT_EQ(loaded.eps, settings_.eps);
  EXPECT_EQ(loaded.shuffle, settings_.shuffle);
  EXPECT_EQ(loaded.output_dir, settings_.output_dir);
  EXPECT_EQ(loaded.schedule, settings_.schedule);
  EXPECT_EQ(loaded.seq_len, settings_.seq_len);
}

TEST_F(ConfigTest, WholeNumberDoublesStayFloatsInToml) {
  settings_.learning_rate = 2.0;
  EXPECT_NE(schema_.to_toml().find("learning_rate = 2.0\n"), std::string::npos);
}

TEST_F(ConfigTest, KeysInRegistrationOrder) {
  const std::vector<std::string> keys = schema_.keys();
  ASSERT_EQ(keys.size(), 7u);
  EXPECT_EQ(keys.front(), "train.steps");
  EXPECT_EQ(keys.back(), "data.seq_len");
}

TEST(EditDistance, Basics) {
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("same", "same"), 0u);
}

}  // namespace
}  // namespace shardtrain
