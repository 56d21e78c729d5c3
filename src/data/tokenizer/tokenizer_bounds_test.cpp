// Small tokenizer.json files that asked for unbounded work: many added tokens (quadratic to
// load: 40,000 took 6 s), a Split pattern whose every match looks ahead over the whole text
// (minutes on 1 MiB), Sequence steps nested 100,000 deep (a stack overflow). Each now loads in
// linear time or ends in one Error.
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "data/testing/tiny_tokenizer.h"
#include "data/tokenizer/pre_tokenizer.h"
#include "data/tokenizer/tokenizer.h"

namespace shardtrain {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& error) {
    return error.what();
  }
  return "(no error)";
}

// tokenizer.json text with `count` extra added tokens that all start with '<'.
std::string with_added_tokens(int count) {
  json config = testing::tiny_tokenizer_json();
  for (int i = 0; i < count; ++i) {
    config["added_tokens"].push_back(
        testing::special_token_json(1000 + i, "<|extra_" + std::to_string(i) + "|>"));
  }
  return config.dump();
}

double seconds_to_load(const std::string& text) {
  const auto start = Clock::now();
  Tokenizer::from_json_text(text, "many.json");
  return std::chrono::duration<double>(Clock::now() - start).count();
}

TEST(TokenizerBounds, ManyAddedTokensWithOneFirstByteLoadInLinearTime) {
  // 4x the tokens must cost about 4x the time (quadratic: 16x; sorting a bucket per insertion
  // took 6 s for 40,000 tokens). The ratio, not a wall-clock bound, so a loaded machine passes.
  const std::string small = with_added_tokens(20'000), large = with_added_tokens(80'000);
  seconds_to_load(small);  // warm the allocator
  const double small_s = seconds_to_load(small), large_s = seconds_to_load(large);
  EXPECT_LT(large_s, 8 * small_s + 0.5) << small_s << " s for 20,000, " << large_s
                                        << " s for 80,000 added tokens";
  // Longest match among tokens that share a prefix; plain text between them.
  const Tokenizer tokenizer = Tokenizer::from_json_text(large, "many.json");
  EXPECT_EQ(tokenizer.encode("<|extra_12|><|extra_12345|>x<|extra_1|>", false),
            (std::vector<int32_t>{1012, 1000 + 12345, 'x', 1001}));
  std::string many;
  for (int i = 0; i < 2'000; ++i) many += "<|extra_" + std::to_string(i * 7) + "|> a ";
  EXPECT_EQ(tokenizer.encode(many, false).size(), 2'000u * 4);
}

TEST(TokenizerBounds, AQuadraticSplitPatternEndsInOneErrorWithinItsBudget) {
  auto pre_tokenizer = tokenizer::parse_pre_tokenizer(
      {{"type", "Split"},
       {"pattern", {{"Regex", "a(?=.*Z)"}}},
       {"behavior", "Isolated"},
       {"invert", false}},
      {"evil.json", "pre_tokenizer"});
  std::vector<tokenizer::Piece> pieces{{std::string(1 << 20, 'a') + "Z", true}}, scratch;
  const auto start = Clock::now();
  const std::string error = error_of([&] { pre_tokenizer->pre_tokenize(pieces, scratch); });
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_NE(error.find("evil.json"), std::string::npos) << error;
  EXPECT_NE(error.find("the pre-tokenizer regex 'a(?=.*Z)' needs more than 3 s on a 1048577-byte"),
            std::string::npos)
      << error;
  EXPECT_LT(seconds, 10.0);
  // The same pattern on a short text is fine.
  std::vector<tokenizer::Piece> small{{"aaZ", true}};
  pre_tokenizer->pre_tokenize(small, scratch);
  EXPECT_EQ(small.size(), 3u);
}

TEST(TokenizerBounds, DeeplyNestedSequencesAreOneLineErrors) {
  std::string nested;
  for (int i = 0; i < 100'000; ++i) nested += R"({"type": "Sequence", "normalizers": [)";
  for (int i = 0; i < 100'000; ++i) nested += "]}";
  json config = testing::tiny_tokenizer_json();
  config["normalizer"] = nullptr;
  std::string text = config.dump();
  text.replace(text.find("\"normalizer\":null"), 17, "\"normalizer\":" + nested);
  const std::string error = error_of([&] { Tokenizer::from_json_text(text, "deep.json"); });
  EXPECT_NE(error.find("deep.json: JSON nested deeper than 128 levels"), std::string::npos)
      << error.substr(0, 300);
}

}  // namespace
}  // namespace shardtrain
