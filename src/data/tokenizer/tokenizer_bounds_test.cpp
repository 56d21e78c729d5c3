// Small tokenizer.json files that asked for unbounded work: 250,000 added tokens (quadratic to
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

TEST(TokenizerBounds, ManyAddedTokensWithOneFirstByteLoadInLinearTime) {
  json config = testing::tiny_tokenizer_json();
  for (int i = 0; i < 250'000; ++i) {
    config["added_tokens"].push_back(
        testing::special_token_json(1000 + i, "<|extra_" + std::to_string(i) + "|>"));
  }
  const std::string text = config.dump();
  const auto start = Clock::now();
  const Tokenizer tokenizer = Tokenizer::from_json_text(text, "many.json");
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_LT(seconds, 30.0) << "loading 250,000 added tokens is not linear";
  // Longest match among tokens that share a prefix; plain text between them.
  EXPECT_EQ(tokenizer.encode("<|extra_12|><|extra_123456|>x<|extra_1|>", false),
            (std::vector<int32_t>{1012, 1000 + 123456, 'x', 1001}));
  const auto encode_start = Clock::now();
  std::string many;
  for (int i = 0; i < 2'000; ++i) many += "<|extra_" + std::to_string(i * 7) + "|> a ";
  EXPECT_EQ(tokenizer.encode(many, false).size(), 2'000u * 4);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - encode_start).count(), 30.0);
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
