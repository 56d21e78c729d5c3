// The config loader and the JSON readers against hostile files: deep nesting (which overflowed
// the stack inside toml++), devices and FIFOs (read until memory ran out, or blocked forever),
// oversized files. Each ends in one Error naming the file and what to fix.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <string>

#include "core/config.h"
#include "core/error.h"
#include "core/json_depth.h"
#include "core/testing/test_support.h"
#include "core/toml_nesting.h"

namespace shardtrain {
namespace {

using testing::error_of;

std::string repeated(const std::string& part, int times) {
  std::string out;
  for (int i = 0; i < times; ++i) out += part;
  return out;
}

std::string joined(const std::string& part, const std::string& separator, int times) {
  std::string out = part;
  for (int i = 1; i < times; ++i) out += separator + part;
  return out;
}

class ConfigBoundsTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    schema_.add("train.steps", &steps_, "optimizer steps");
  }
  std::string load_error(const std::string& text) {
    return error_of([&] { schema_.load_toml_text(text, "job.toml"); });
  }
  int64_t steps_ = 100;
  ConfigSchema schema_;
};

TEST_F(ConfigBoundsTest, DeepTableHeadersAndDottedKeysAreOneLineErrors) {
  const std::string header = load_error("[" + joined("a", ".", 100'000) + "]\nx = 1\n");
  EXPECT_NE(header.find("config job.toml: line 1, column 129: tables, keys or arrays nested "
                        "deeper than 64 levels"),
            std::string::npos)
      << header;
  const std::string dotted = load_error("[train]\n" + joined("a", ".", 100'000) + " = 1\n");
  EXPECT_NE(dotted.find("line 2, column "), std::string::npos) << dotted;
  const std::string inline_tables =
      load_error("a = " + repeated("{b = ", 100'000) + "1" + repeated("}", 100'000) + "\n");
  EXPECT_NE(inline_tables.find("nested deeper than 64 levels"), std::string::npos) << inline_tables;
  const std::string arrays =
      load_error("a = " + repeated("[", 100'000) + repeated("]", 100'000) + "\n");
  EXPECT_NE(arrays.find("nested deeper than 64 levels"), std::string::npos) << arrays;
  EXPECT_EQ(steps_, 100);
}

TEST_F(ConfigBoundsTest, NestingScanKnowsStringsCommentsAndValues) {
  // Dots inside strings, comments, floats and dates are not key parts.
  const std::string dots(200, '.');
  EXPECT_EQ(toml_nesting_problem("a = \"" + dots + "\"\nb = '" + dots + "'\n# " + dots +
                                 "\nc = [1.5, 2.5, 1979-05-27T07:32:00.999]\nd = \"\"\"\n[" +
                                 joined("x", ".", 100) + "]\n\"\"\"\n"),
            std::nullopt);
  // 64 parts is the limit, 65 is refused; an inline table counts as a level below its key.
  EXPECT_EQ(toml_nesting_problem("[" + joined("a", ".", 64) + "]\n"), std::nullopt);
  EXPECT_NE(toml_nesting_problem("[" + joined("a", ".", 65) + "]\n"), std::nullopt);
  EXPECT_NE(
      toml_nesting_problem("[" + joined("a", ".", 40) + "]\n" + joined("b", ".", 25) + " = 1\n"),
      std::nullopt);
  EXPECT_EQ(
      toml_nesting_problem("[" + joined("a", ".", 40) + "]\n" + joined("b", ".", 24) + " = 1\n"),
      std::nullopt);
  EXPECT_NE(toml_nesting_problem("x = {" + joined("b", ".", 64) + " = 1}\n"), std::nullopt);
  schema_.load_toml_text("[train] # a.b.c.d\nsteps = 7 # e.f\n", "job.toml");
  EXPECT_EQ(steps_, 7);
}

TEST_F(ConfigBoundsTest, DevicesFifosAndHugeFilesAreRefusedWithoutReading) {
  const std::string zero = error_of([&] { schema_.load_toml_file("/dev/zero"); });
  EXPECT_EQ(zero,
            "config /dev/zero: not a regular file (a device, FIFO or socket); pass the path of a "
            ".toml file");
  const std::string fifo = path("job.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Opening a FIFO nobody writes blocks forever: the check must come first (ctest's timeout
  // catches a regression).
  const std::string fifo_error = error_of([&] { schema_.load_toml_file(fifo); });
  EXPECT_NE(fifo_error.find("not a regular file"), std::string::npos) << fifo_error;
  const std::string huge = write("huge.toml", "[train]\nsteps = 5\n" + std::string(5 << 20, '#'));
  const std::string huge_error = error_of([&] { schema_.load_toml_file(huge); });
  EXPECT_NE(huge_error.find("over the 4 MiB a config file may have"), std::string::npos)
      << huge_error;
  EXPECT_EQ(steps_, 100);
  schema_.load_toml_file(write("ok.toml", "[train]\nsteps = 5\n"));
  EXPECT_EQ(steps_, 5);
}

TEST(JsonDepth, MeasuresBracketsOutsideStrings) {
  EXPECT_EQ(json_nesting_problem("{\"a\": [[1], {\"b\": \"[[[[[[\"}]}", 3), std::nullopt);
  EXPECT_EQ(json_nesting_problem("[[[[]]]]", 4), std::nullopt);
  EXPECT_EQ(*json_nesting_problem("[[[[[]]]]]", 4), "JSON nested deeper than 4 levels (at byte 5)");
  // An escaped quote does not end the string: the brackets after it are still inside.
  EXPECT_EQ(json_nesting_problem("[\"\\\"[[[[[[\"]", 2), std::nullopt);
  const std::string deep = repeated("[", 100'000) + repeated("]", 100'000);
  const std::string error = error_of([&] { check_json_nesting(deep, "data.jsonl:3"); });
  EXPECT_EQ(error,
            "data.jsonl:3: JSON nested deeper than 128 levels (at byte 129); flatten the nested "
            "arrays/objects");
}

}  // namespace
}  // namespace shardtrain
