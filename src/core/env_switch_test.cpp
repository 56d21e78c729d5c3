#include "core/env_switch.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/testing/test_support.h"

namespace shardtrain {
namespace {

using testing::error_of;

TEST(EnvSwitchTest, OnOffAndTheDefault) {
  EXPECT_TRUE(parse_env_switch("X", nullptr, true));
  EXPECT_FALSE(parse_env_switch("X", nullptr, false));
  EXPECT_FALSE(parse_env_switch("X", "", false));
  EXPECT_TRUE(parse_env_switch("X", "1", false));
  EXPECT_FALSE(parse_env_switch("X", "0", true));
}

TEST(EnvSwitchTest, AnyOtherSpellingIsAnErrorNamingTheVariable) {
  for (const char* bad : {"yes", "true", "on", "01", " 1", "1 ", "2", "-1"}) {
    const std::string message = error_of([&] { parse_env_switch("SHARDTRAIN_X", bad, true); });
    EXPECT_NE(message.find("SHARDTRAIN_X='" + std::string(bad) + "'"), std::string::npos)
        << message;
    EXPECT_NE(message.find("unset means on"), std::string::npos) << message;
  }
  // A huge value is cut in the message.
  const std::string huge(100000, 'z');
  const std::string message = error_of([&] { parse_env_switch("X", huge.c_str(), false); });
  EXPECT_LT(message.size(), 200u);
  EXPECT_NE(message.find("..."), std::string::npos);
}

TEST(EnvSwitchTest, ChoicesByIndexTheFirstBeingTheDefault) {
  EXPECT_EQ(parse_env_choice("X", nullptr, {"a", "b", "c"}), 0);
  EXPECT_EQ(parse_env_choice("X", "", {"a", "b", "c"}), 0);
  EXPECT_EQ(parse_env_choice("X", "b", {"a", "b", "c"}), 1);
  EXPECT_EQ(parse_env_choice("X", "c", {"a", "b", "c"}), 2);
  const std::string message = error_of([] { parse_env_choice("SHARDTRAIN_Y", "B", {"a", "b"}); });
  EXPECT_NE(message.find("SHARDTRAIN_Y='B'"), std::string::npos) << message;
  EXPECT_NE(message.find("a, b"), std::string::npos) << message;
  EXPECT_NE(message.find("unset means a"), std::string::npos) << message;
}

TEST(EnvSwitchTest, ReadsTheEnvironmentOnEveryCall) {
  ::setenv("SHARDTRAIN_ENV_SWITCH_TEST", "0", 1);
  EXPECT_FALSE(env_switch("SHARDTRAIN_ENV_SWITCH_TEST", true));
  ::setenv("SHARDTRAIN_ENV_SWITCH_TEST", "1", 1);
  EXPECT_TRUE(env_switch("SHARDTRAIN_ENV_SWITCH_TEST", false));
  ::setenv("SHARDTRAIN_ENV_SWITCH_TEST", "b", 1);
  EXPECT_EQ(env_choice("SHARDTRAIN_ENV_SWITCH_TEST", {"a", "b"}), 1);
  ::unsetenv("SHARDTRAIN_ENV_SWITCH_TEST");
  EXPECT_EQ(env_choice("SHARDTRAIN_ENV_SWITCH_TEST", {"a", "b"}), 0);
}

}  // namespace
}  // namespace shardtrain
