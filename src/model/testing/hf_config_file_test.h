// HfConfigFileTest: a test fixture that writes config.json text into its own temporary directory
// and reads it with read_hf_config, for the config tests of every family.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/testing/test_support.h"
#include "model/hf_config.h"

namespace shardtrain::testing {

class HfConfigFileTest : public TempDirTest {
 protected:
  // Writes `text` as DIR/config.json; returns its path.
  std::string write(const std::string& text) {
    const std::string path = (dir_ / "config.json").string();
    std::ofstream(path, std::ios::trunc) << text;
    return path;
  }

  // Expects read_hf_config on `text` to throw one line mentioning the file and each needle.
  void expect_error(const std::string& text, const std::vector<std::string>& needles) {
    const std::string path = write(text);
    try {
      read_hf_config(path);
      ADD_FAILURE() << "no Error for config " << text;
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(path), std::string::npos) << message;
      for (const std::string& needle : needles)
        EXPECT_NE(message.find(needle), std::string::npos) << message << " lacks " << needle;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
  }
};

}  // namespace shardtrain::testing
