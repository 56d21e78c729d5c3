#include "data/tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <optional>
#include <vector>

#include "core/error.h"
#include "data/tokenizer/regex.h"
#include "data/tokenizer/replace_rule.h"
#include "data/tokenizer/utf8.h"

namespace shardtrain::tokenizer {
namespace {

bool is_ascii(std::string_view text) {
  for (char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

// Applies utf8proc with `options` to one valid UTF-8 run.
void append_unicode_normalized(std::string_view run, utf8proc_option_t options, std::string& out) {
  if (run.empty()) return;
  utf8proc_uint8_t* result = nullptr;
  const utf8proc_ssize_t length =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(run.data()),
                   static_cast<utf8proc_ssize_t>(run.size()), &result, options);
  if (length < 0) {
    out.append(run);  // cannot happen for valid UTF-8 except out of memory; keep the text
    return;
  }
  out.append(reinterpret_cast<const char*>(result), static_cast<size_t>(length));
  std::free(result);
}

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(utf8proc_option_t options) : options_(options) {}

  void normalize(std::string& text) const override {
    if (is_ascii(text)) return;  // ASCII is invariant under every normalization form
    std::string out;
    out.reserve(text.size() + 16);
    size_t run_start = 0, pos = 0;
    while (pos < text.size()) {
      const Utf8Unit unit = decode_utf8(text, pos);
      if (unit.code_point == kInvalidCodePoint) {
        std::string_view view(text);
        append_unicode_normalized(view.substr(run_start, pos - run_start), options_, out);
        out.append(view.substr(pos, unit.length));
        run_start = pos + unit.length;
      }
      pos += unit.length;
    }
    append_unicode_normalized(std::string_view(text).substr(run_start), options_, out);
    text = std::move(out);
  }

 private:
  utf8proc_option_t options_;
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);  // as `tokenizers`: empty text stays empty
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  explicit ReplaceNormalizer(ReplaceRule rule) : rule_(std::move(rule)) {}
  void normalize(std::string& text) const override { rule_.apply(text); }

 private:
  ReplaceRule rule_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  void normalize(std::string& text) const override {
    for (const auto& step : steps_) step->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace

std::unique_ptr<Normalizer> parse_normalizer(const nlohmann::json& config, const ConfigSite& site) {
  if (config.is_null()) return nullptr;
  const std::string type = component_type(config, site);
  if (type == "NFC")
    return std::make_unique<UnicodeNormalizer>(
        static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (type == "NFD")
    return std::make_unique<UnicodeNormalizer>(
        static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE));
  if (type == "NFKC")
    return std::make_unique<UnicodeNormalizer>(
        static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT));
  if (type == "NFKD")
    return std::make_unique<UnicodeNormalizer>(
        static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT));
  if (type == "Prepend") {
    return std::make_unique<PrependNormalizer>(string_field(config, "prepend", site));
  }
  if (type == "Replace") {
    return std::make_unique<ReplaceNormalizer>(ReplaceRule::parse(config, site));
  }
  if (type == "Sequence") {
    return std::make_unique<SequenceNormalizer>(
        sequence_steps<Normalizer>(config, "normalizers", site, parse_normalizer));
  }
  fail_unsupported("normalizer", type, site);
}

}  // namespace shardtrain::tokenizer
