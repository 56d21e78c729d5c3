// The real tokenizer files of the golden tests (tools/tokenizer/fetch_tokenizers.sh puts them in
// tests/tokenizer/files/NAME/, or $SHARDTRAIN_TOKENIZER_DIR/NAME/): where they are, each loaded
// once per process, and REQUIRE_REAL_TOKENIZER, which skips a test with a visible message when
// the file is absent. Header-only, for *_test.cpp files (SHARDTRAIN_SOURCE_DIR defined by CMake).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "data/tokenizer/tokenizer.h"

namespace shardtrain::testing {

inline const char* const kFetchTokenizersHint =
    "run tools/tokenizer/fetch_tokenizers.sh (or set SHARDTRAIN_TOKENIZER_DIR) to enable it";

inline std::filesystem::path real_tokenizers_root() {
  if (const char* env = std::getenv("SHARDTRAIN_TOKENIZER_DIR"); env != nullptr && *env != 0) {
    return env;
  }
  return std::filesystem::path(SHARDTRAIN_SOURCE_DIR) / "tests" / "tokenizer" / "files";
}

// The folder of one real tokenizer (it may not exist).
inline std::filesystem::path real_tokenizer_dir(const std::string& name) {
  return real_tokenizers_root() / name;
}

// Loads one real tokenizer once per process; nullptr when its tokenizer.json is absent.
inline const Tokenizer* real_tokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> loaded;
  auto it = loaded.find(name);
  if (it == loaded.end()) {
    const std::filesystem::path path = real_tokenizer_dir(name) / "tokenizer.json";
    std::unique_ptr<Tokenizer> tokenizer;
    if (std::filesystem::exists(path)) {
      tokenizer = std::make_unique<Tokenizer>(Tokenizer::load(path.string()));
    }
    it = loaded.emplace(name, std::move(tokenizer)).first;
  }
  return it->second.get();
}

}  // namespace shardtrain::testing

// Declares `const Tokenizer* var` = the real tokenizer NAME, or skips the test naming the file.
#define REQUIRE_REAL_TOKENIZER(var, name)                                                         \
  const ::shardtrain::Tokenizer* var = ::shardtrain::testing::real_tokenizer(name);               \
  if (var == nullptr) {                                                                           \
    GTEST_SKIP() << (::shardtrain::testing::real_tokenizer_dir(name) / "tokenizer.json").string() \
                 << " is absent; " << ::shardtrain::testing::kFetchTokenizersHint;                \
  }
