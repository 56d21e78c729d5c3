#include "data/tokenizer/decoder.h"

#include <optional>

#include "core/error.h"
#include "data/tokenizer/byte_level.h"
#include "data/tokenizer/regex.h"
#include "data/tokenizer/replace_rule.h"
#include "data/tokenizer/utf8.h"

namespace shardtrain::tokenizer {
namespace {

class ByteLevelDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& token : tokens) {
      const size_t token_start = bytes.size();
      bool all_mapped = true;
      for (size_t pos = 0; pos < token.size();) {
        const Utf8Unit unit = decode_utf8(token, pos);
        const int byte =
            unit.code_point == kInvalidCodePoint ? -1 : unicode_to_byte(unit.code_point);
        if (byte < 0) {
          all_mapped = false;
          break;
        }
        bytes.push_back(static_cast<char>(byte));
        pos += unit.length;
      }
      // A token with any character outside the map contributes its own bytes unchanged.
      if (!all_mapped) {
        bytes.resize(token_start);
        bytes += token;
      }
    }
    tokens.assign(1, utf8_lossy(bytes));
  }
};

class ReplaceDecoder : public Decoder {
 public:
  explicit ReplaceDecoder(ReplaceRule rule) : rule_(std::move(rule)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& token : tokens) rule_.apply(token);
  }

 private:
  ReplaceRule rule_;
};

// "<0xAB>" -> 0xAB; -1 for anything else.
int parse_byte_token(const std::string& token) {
  if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>') return -1;
  int value = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = token[i];
    int digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'A' && c <= 'F') {
      digit = c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else {
      return -1;
    }
    value = value * 16 + digit;
  }
  return value;
}

class ByteFallbackDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string pending_bytes;
    const auto flush = [&] {
      if (pending_bytes.empty()) return;
      if (is_valid_utf8(pending_bytes)) {
        out.push_back(pending_bytes);
      } else {
        for (size_t i = 0; i < pending_bytes.size(); ++i) out.emplace_back("\xEF\xBF\xBD");
      }
      pending_bytes.clear();
    };
    for (std::string& token : tokens) {
      const int byte = parse_byte_token(token);
      if (byte >= 0) {
        pending_bytes.push_back(static_cast<char>(byte));
        continue;
      }
      flush();
      out.push_back(std::move(token));
    }
    flush();
    tokens = std::move(out);
  }
};

class FuseDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string fused;
    for (const std::string& token : tokens) fused += token;
    tokens.assign(1, std::move(fused));
  }
};

class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop)
      : content_(content), start_(start), stop_(stop) {}

  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& token : tokens) {
      std::vector<std::pair<size_t, size_t>> chars;  // (byte offset, length)
      std::vector<char32_t> code_points;
      for (size_t pos = 0; pos < token.size();) {
        const Utf8Unit unit = decode_utf8(token, pos);
        chars.emplace_back(pos, unit.length);
        code_points.push_back(unit.code_point);
        pos += unit.length;
      }
      size_t start_cut = 0;
      while (start_cut < start_ && start_cut < code_points.size() &&
             code_points[start_cut] == content_) {
        ++start_cut;
      }
      size_t stop_cut = 0;
      while (stop_cut < stop_ && stop_cut < code_points.size() &&
             code_points[code_points.size() - 1 - stop_cut] == content_) {
        ++stop_cut;
      }
      // `tokenizers` keeps (byte length - start_cut - stop_cut) characters after the start cut.
      const size_t removed = start_cut + stop_cut;
      const size_t keep_chars = token.size() > removed ? token.size() - removed : 0;
      const size_t first = std::min(start_cut, chars.size());
      const size_t last = std::min(chars.size(), first + keep_chars);
      if (first >= last) {
        token.clear();
        continue;
      }
      const size_t begin_byte = chars[first].first;
      const size_t end_byte = chars[last - 1].first + chars[last - 1].second;
      token = token.substr(begin_byte, end_byte - begin_byte);
    }
  }

 private:
  char32_t content_;
  size_t start_;
  size_t stop_;
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}

  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& token = tokens[i];
      std::string out;
      size_t pos = 0;
      for (size_t found = token.find(replacement_); found != std::string::npos;
           found = token.find(replacement_, pos)) {
        out.append(token, pos, found - pos);
        if (!(i == 0 && strip_first_)) out.push_back(' ');
        pos = found + replacement_.size();
      }
      out.append(token, pos, std::string::npos);
      token = std::move(out);
    }
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps)
      : steps_(std::move(steps)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& step : steps_) step->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

std::unique_ptr<Decoder> parse_replace(const nlohmann::json& config, const ConfigSite& site) {
  return std::make_unique<ReplaceDecoder>(ReplaceRule::parse(config, site));
}

char32_t single_character(const std::string& text, const ConfigSite& site, const char* key) {
  if (text.empty()) fail("{}: {}.{} must be one character", site.file, site.location, key);
  const Utf8Unit unit = decode_utf8(text, 0);
  if (unit.length != text.size() || unit.code_point == kInvalidCodePoint) {
    fail("{}: {}.{} must be one character", site.file, site.location, key);
  }
  return unit.code_point;
}

}  // namespace

std::unique_ptr<Decoder> parse_decoder(const nlohmann::json& config, const ConfigSite& site) {
  if (config.is_null()) return nullptr;
  const std::string type = component_type(config, site);
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Replace") return parse_replace(config, site);
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    const std::string content = string_field(config, "content", site);
    const int64_t start = int_field(config, "start", 0, site);
    const int64_t stop = int_field(config, "stop", 0, site);
    if (start < 0 || stop < 0)
      fail("{}: {}: start and stop must be >= 0", site.file, site.location);
    return std::make_unique<StripDecoder>(single_character(content, site, "content"),
                                          static_cast<size_t>(start), static_cast<size_t>(stop));
  }
  if (type == "Metaspace") {
    bool strip_first = bool_field(config, "add_prefix_space", true, site);
    if (config.contains("prepend_scheme") && !config["prepend_scheme"].is_null()) {
      strip_first = string_field(config, "prepend_scheme", site) != "never";
    }
    return std::make_unique<MetaspaceDecoder>(string_field(config, "replacement", site),
                                              strip_first);
  }
  if (type == "Sequence") {
    const ConfigSite list_site = site.child("decoders");
    const nlohmann::json& list = array_field(config, "decoders", site);
    std::vector<std::unique_ptr<Decoder>> steps;
    for (size_t i = 0; i < list.size(); ++i) {
      if (auto step = parse_decoder(list[i], list_site.element(i)))
        steps.push_back(std::move(step));
    }
    return std::make_unique<SequenceDecoder>(std::move(steps));
  }
  fail_unsupported("decoder", type, site);
}

}  // namespace shardtrain::tokenizer
