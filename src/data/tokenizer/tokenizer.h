// Tokenizer: a Hugging Face tokenizer.json (BPE family: Llama 2, Llama 3, Qwen, Mistral)
// implemented in C++, producing the same ids as the Python `tokenizers` package.
//
// encode(text) runs the `tokenizers` pipeline:
//   added tokens (raw) -> normalizer -> added tokens (normalized) -> pre_tokenizer -> BPE model
//   -> post_processor (only when add_special_tokens)
// decode(ids) maps ids to token strings (added tokens first, then the model vocabulary; unknown
// ids are dropped; special tokens dropped when skip_special_tokens) and runs the decoder.
//
// Input text is UTF-8. Invalid UTF-8 never crashes or throws: invalid bytes are kept as they are
// (see utf8.h) and encoded like any byte (byte-level BPE) or as <0xXX> byte tokens (byte
// fallback), so encode/decode round trips of invalid input give U+FFFD where the bytes were.
// The "truncation" and "padding" sections of tokenizer.json are ignored: shardtrain packs and
// pads sequences itself.
//
// A loaded Tokenizer is immutable apart from an internal word cache and is safe to use from
// several threads at once. It is movable, not copyable.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shardtrain {

namespace tokenizer {
class AddedTokens;
class BpeModel;
class Decoder;
class Normalizer;
class PostProcessor;
class PreTokenizer;
}  // namespace tokenizer

class Tokenizer {
 public:
  // Throws Error naming the path when the file cannot be read, is not JSON, or uses a component
  // this implementation does not support (e.g. a WordPiece or Unigram model).
  static Tokenizer load(const std::string& tokenizer_json_path);
  // As load(), from the file's contents; `source_name` stands for the path in error messages.
  static Tokenizer from_json_text(std::string_view json_text, const std::string& source_name);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;
  ~Tokenizer();

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const;

  // Largest id (model vocabulary or added token) + 1: the embedding rows a model needs.
  int64_t vocab_size() const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int32_t id) const;

 private:
  Tokenizer();

  std::unique_ptr<tokenizer::Normalizer> normalizer_;
  std::unique_ptr<tokenizer::PreTokenizer> pre_tokenizer_;
  std::unique_ptr<tokenizer::BpeModel> model_;
  std::unique_ptr<tokenizer::AddedTokens> added_tokens_;
  std::unique_ptr<tokenizer::PostProcessor> post_processor_;
  std::unique_ptr<tokenizer::Decoder> decoder_;
};

}  // namespace shardtrain
