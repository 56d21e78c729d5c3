// A tiny hand-written byte-level tokenizer.json for tests of the data pipeline: every byte is one
// token (ids 0..255 = byte values, no merges), plus the special tokens of the three chat template
// families (ids from kTinyFirstSpecialId, in kTinySpecialTokens order). Token counts and masks
// are then plain byte arithmetic. Header-only, for *_test.cpp files.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/tokenizer/byte_level.h"

namespace shardtrain::testing {

inline constexpr int32_t kTinyFirstSpecialId = 256;
inline const std::vector<std::string> kTinySpecialTokens = {"<|endoftext|>",
                                                            "<|im_start|>",
                                                            "<|im_end|>",
                                                            "<|begin_of_text|>",
                                                            "<|start_header_id|>",
                                                            "<|end_header_id|>",
                                                            "<|eot_id|>",
                                                            "<s>",
                                                            "</s>"};

inline int32_t tiny_special_id(const std::string& token) {
  for (size_t i = 0; i < kTinySpecialTokens.size(); ++i) {
    if (kTinySpecialTokens[i] == token) return kTinyFirstSpecialId + static_cast<int32_t>(i);
  }
  return -1;
}

// A tokenizer.json of a BPE model with `vocab` (an object token -> id) and `merges`, and nothing
// else: no normalizer, pre-tokenizer, post-processor, decoder or added tokens.
inline nlohmann::json bpe_tokenizer_json(const nlohmann::json& vocab,
                                         const nlohmann::json& merges) {
  using nlohmann::json;
  return json{{"version", "1.0"},
              {"added_tokens", json::array()},
              {"normalizer", nullptr},
              {"pre_tokenizer", nullptr},
              {"post_processor", nullptr},
              {"decoder", nullptr},
              {"model",
               {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"vocab", vocab},
                {"merges", merges}}}};
}

// An added_tokens entry: special token `content` with id `id`, matched as it is (no strip or
// word rules, not normalized).
inline nlohmann::json special_token_json(int id, const std::string& content) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", true}};
}

// `config` with GPT-2's byte-level pre-tokenizer (regex split, no prefix space) and decoder.
inline nlohmann::json with_byte_level(nlohmann::json config) {
  config["pre_tokenizer"] = {{"type", "ByteLevel"},
                             {"add_prefix_space", false},
                             {"trim_offsets", true},
                             {"use_regex", true}};
  config["decoder"] = {{"type", "ByteLevel"}};
  return config;
}

inline nlohmann::json tiny_tokenizer_json() {
  using nlohmann::json;
  json vocab = json::object();
  for (int byte = 0; byte < 256; ++byte) {
    std::string key;
    const char32_t c = tokenizer::byte_to_unicode(static_cast<uint8_t>(byte));
    // UTF-8 of c (all mapped code points are below U+0800).
    if (c < 0x80) {
      key += static_cast<char>(c);
    } else {
      key += static_cast<char>(0xC0 | (c >> 6));
      key += static_cast<char>(0x80 | (c & 0x3F));
    }
    vocab[key] = byte;
  }
  json added = json::array();
  for (size_t i = 0; i < kTinySpecialTokens.size(); ++i) {
    added.push_back(
        special_token_json(kTinyFirstSpecialId + static_cast<int>(i), kTinySpecialTokens[i]));
  }
  json config = with_byte_level(bpe_tokenizer_json(vocab, json::array()));
  config["added_tokens"] = added;
  return config;
}

// Writes DIR/tokenizer.json and DIR/tokenizer_config.json (eos <|endoftext|>, a ChatML
// chat_template) and returns DIR.
inline std::string write_tiny_tokenizer(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << tiny_tokenizer_json().dump();
  const nlohmann::json config = {
      {"eos_token", "<|endoftext|>"},
      {"pad_token", nullptr},
      {"chat_template",
       "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
       "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"}};
  std::ofstream(dir / "tokenizer_config.json") << config.dump();
  return dir.string();
}

}  // namespace shardtrain::testing
