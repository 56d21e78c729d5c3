#include "data/tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <optional>

#include "core/error.h"
#include "data/tokenizer/byte_level.h"
#include "data/tokenizer/regex.h"
#include "data/tokenizer/utf8.h"

namespace shardtrain::tokenizer {
namespace {

// The pattern ByteLevel uses when use_regex is true (GPT-2's).
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct Span {
  size_t start;
  size_t end;
  bool is_match;  // after inversion: true for delimiter spans
};

// Finds pattern occurrences: a literal string or a regex.
class SplitPattern {
 public:
  explicit SplitPattern(std::string literal) : literal_(std::move(literal)) {}
  explicit SplitPattern(Regex regex) : regex_(std::move(regex)) {}

  void find(std::string_view text, std::vector<MatchSpan>& matches) const {
    if (regex_) {
      regex_->find_all(text, matches);
      return;
    }
    matches.clear();
    if (literal_.empty()) return;
    for (size_t pos = text.find(literal_); pos != std::string_view::npos;
         pos = text.find(literal_, pos + literal_.size())) {
      matches.push_back({pos, pos + literal_.size()});
    }
  }

 private:
  std::string literal_;
  std::optional<Regex> regex_;
};

// Cuts `piece` at `matches` with `behavior`, appending the non-empty results to `out`.
void split_piece(const Piece& piece, const std::vector<MatchSpan>& matches, bool invert,
                 SplitBehavior behavior, std::vector<Piece>& out) {
  const std::string_view text = piece.text;
  if (text.empty()) return;
  // The spans cover the whole text: gaps (not matched) and matches, in order.
  std::vector<Span> spans;
  spans.reserve(matches.size() * 2 + 1);
  size_t previous_end = 0;
  for (const MatchSpan& match : matches) {
    if (match.start > previous_end) spans.push_back({previous_end, match.start, invert});
    spans.push_back({match.start, match.end, !invert});
    previous_end = match.end;
  }
  if (previous_end < text.size()) spans.push_back({previous_end, text.size(), invert});

  // (start, end, keep) after applying the behavior, as `tokenizers` folds them.
  std::vector<Span> kept;  // is_match here means "remove"
  kept.reserve(spans.size());
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const Span& s : spans) kept.push_back({s.start, s.end, false});
      break;
    case SplitBehavior::kRemoved:
      kept = spans;
      break;
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      for (const Span& s : spans) {
        if (s.is_match == previous_match && !kept.empty()) {
          kept.back().end = s.end;
        } else {
          kept.push_back({s.start, s.end, false});
        }
        previous_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !kept.empty()) {
          kept.back().end = s.end;
        } else {
          kept.push_back({s.start, s.end, false});
        }
        previous_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous_match = false;
      for (size_t i = spans.size(); i-- > 0;) {
        const Span& s = spans[i];
        if (s.is_match && !previous_match && !kept.empty()) {
          kept.back().start = s.start;
        } else {
          kept.push_back({s.start, s.end, false});
        }
        previous_match = s.is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    }
  }
  for (const Span& s : kept) {
    if (s.is_match || s.end == s.start) continue;
    out.push_back(
        {std::string(text.substr(s.start, s.end - s.start)), piece.at_text_start && s.start == 0});
  }
}

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(SplitPattern pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}

  void pre_tokenize(std::vector<Piece>& pieces, std::vector<Piece>& scratch) const override {
    scratch.clear();
    std::vector<MatchSpan> matches;
    for (const Piece& piece : pieces) {
      pattern_.find(piece.text, matches);
      split_piece(piece, matches, invert_, behavior_, scratch);
    }
    pieces.swap(scratch);
  }

 private:
  SplitPattern pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::optional<Regex> gpt2_regex)
      : add_prefix_space_(add_prefix_space), gpt2_regex_(std::move(gpt2_regex)) {}

  void pre_tokenize(std::vector<Piece>& pieces, std::vector<Piece>& scratch) const override {
    scratch.clear();
    std::vector<MatchSpan> matches;
    std::vector<Piece> cut;
    for (Piece& piece : pieces) {
      if (piece.text.empty()) continue;
      if (add_prefix_space_ && piece.text[0] != ' ') piece.text.insert(0, 1, ' ');
      if (gpt2_regex_) {
        gpt2_regex_->find_all(piece.text, matches);
        cut.clear();
        split_piece(piece, matches, false, SplitBehavior::kIsolated, cut);
        for (Piece& part : cut) scratch.push_back(to_byte_level(part));
      } else {
        scratch.push_back(to_byte_level(piece));
      }
    }
    pieces.swap(scratch);
  }

 private:
  static Piece to_byte_level(const Piece& piece) {
    Piece mapped{std::string(), piece.at_text_start};
    mapped.text.reserve(piece.text.size() + piece.text.size() / 2);
    append_byte_level(piece.text, mapped.text);
    return mapped;
  }

  bool add_prefix_space_;
  std::optional<Regex> gpt2_regex_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}

  void pre_tokenize(std::vector<Piece>& pieces, std::vector<Piece>& scratch) const override {
    scratch.clear();
    std::vector<MatchSpan> matches;
    for (const Piece& piece : pieces) {
      if (piece.text.empty()) continue;
      Piece rewritten{std::string(), piece.at_text_start};
      for (char c : piece.text) {
        if (c == ' ') {
          rewritten.text += replacement_;
        } else {
          rewritten.text.push_back(c);
        }
      }
      const bool starts_with_replacement = rewritten.text.starts_with(replacement_);
      const bool prepend = scheme_ == PrependScheme::kAlways ||
                           (scheme_ == PrependScheme::kFirst && piece.at_text_start);
      if (prepend && !starts_with_replacement) rewritten.text.insert(0, replacement_);
      if (!split_) {
        scratch.push_back(std::move(rewritten));
        continue;
      }
      matches.clear();
      const std::string_view text = rewritten.text;
      for (size_t pos = text.find(replacement_); pos != std::string_view::npos;
           pos = text.find(replacement_, pos + replacement_.size())) {
        matches.push_back({pos, pos + replacement_.size()});
      }
      split_piece(rewritten, matches, false, SplitBehavior::kMergedWithNext, scratch);
    }
    pieces.swap(scratch);
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  void pre_tokenize(std::vector<Piece>& pieces, std::vector<Piece>& scratch) const override {
    for (const auto& step : steps_) step->pre_tokenize(pieces, scratch);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

SplitBehavior parse_behavior(const std::string& name, const ConfigSite& site) {
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  fail(
      "{}: {}.behavior '{}' is not one of Removed, Isolated, MergedWithPrevious, "
      "MergedWithNext, Contiguous",
      site.file, site.location, name);
}

std::unique_ptr<PreTokenizer> parse_split(const nlohmann::json& config, const ConfigSite& site) {
  const ConfigSite pattern_site = site.child("pattern");
  const nlohmann::json& pattern = config.contains("pattern") ? config["pattern"] : config;
  const SplitBehavior behavior = parse_behavior(string_field(config, "behavior", site), site);
  const bool invert = bool_field(config, "invert", false, site);
  if (pattern.is_object() && pattern.contains("String")) {
    return std::make_unique<SplitPreTokenizer>(
        SplitPattern(string_field(pattern, "String", pattern_site)), behavior, invert);
  }
  if (pattern.is_object() && pattern.contains("Regex")) {
    Regex regex(string_field(pattern, "Regex", pattern_site),
                pattern_site.file + ": " + pattern_site.location);
    return std::make_unique<SplitPreTokenizer>(SplitPattern(std::move(regex)), behavior, invert);
  }
  fail("{}: {} must be {{\"String\": ...}} or {{\"Regex\": ...}}", site.file,
       pattern_site.location);
}

std::unique_ptr<PreTokenizer> parse_metaspace(const nlohmann::json& config,
                                              const ConfigSite& site) {
  const std::string replacement = string_field(config, "replacement", site);
  PrependScheme scheme = bool_field(config, "add_prefix_space", true, site) ? PrependScheme::kAlways
                                                                            : PrependScheme::kNever;
  if (config.contains("prepend_scheme") && !config["prepend_scheme"].is_null()) {
    const std::string name = string_field(config, "prepend_scheme", site);
    if (name == "always") {
      scheme = PrependScheme::kAlways;
    } else if (name == "first") {
      scheme = PrependScheme::kFirst;
    } else if (name == "never") {
      scheme = PrependScheme::kNever;
    } else {
      fail("{}: {}.prepend_scheme '{}' is not one of always, first, never", site.file,
           site.location, name);
    }
  }
  return std::make_unique<MetaspacePreTokenizer>(replacement, scheme,
                                                 bool_field(config, "split", true, site));
}

}  // namespace

std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const nlohmann::json& config,
                                                  const ConfigSite& site) {
  if (config.is_null()) return nullptr;
  const std::string type = component_type(config, site);
  if (type == "Split") return parse_split(config, site);
  if (type == "ByteLevel") {
    std::optional<Regex> regex;
    if (bool_field(config, "use_regex", true, site)) {
      regex.emplace(kGpt2Pattern, site.file + ": " + site.location);
    }
    return std::make_unique<ByteLevelPreTokenizer>(
        bool_field(config, "add_prefix_space", true, site), std::move(regex));
  }
  if (type == "Metaspace") return parse_metaspace(config, site);
  if (type == "Sequence") {
    return std::make_unique<SequencePreTokenizer>(
        sequence_steps<PreTokenizer>(config, "pretokenizers", site, parse_pre_tokenizer));
  }
  fail_unsupported("pre_tokenizer", type, site);
}

}  // namespace shardtrain::tokenizer
