#include "data/tokenizer/replace_rule.h"

#include <vector>

#include "core/error.h"

namespace shardtrain::tokenizer {

ReplaceRule ReplaceRule::parse(const nlohmann::json& config, const ConfigSite& site) {
  const ConfigSite pattern_site = site.child("pattern");
  const nlohmann::json& pattern = config.contains("pattern") ? config["pattern"] : config;
  ReplaceRule rule;
  if (pattern.is_object() && pattern.contains("String")) {
    rule.literal_ = string_field(pattern, "String", pattern_site);
  } else if (pattern.is_object() && pattern.contains("Regex")) {
    rule.regex_.emplace(string_field(pattern, "Regex", pattern_site),
                        pattern_site.file + ": " + pattern_site.location);
  } else {
    fail("{}: {} must be {{\"String\": ...}} or {{\"Regex\": ...}}", site.file,
         pattern_site.location);
  }
  rule.content_ = string_field(config, "content", site);
  return rule;
}

void ReplaceRule::apply(std::string& text) const {
  std::vector<MatchSpan> matches;
  if (regex_) {
    regex_->find_all(text, matches);
  } else if (!literal_.empty()) {
    for (size_t pos = text.find(literal_); pos != std::string::npos;
         pos = text.find(literal_, pos + literal_.size())) {
      matches.push_back({pos, pos + literal_.size()});
    }
  }
  if (matches.empty()) return;
  std::string out;
  out.reserve(text.size() + matches.size() * content_.size());
  size_t previous_end = 0;
  for (const MatchSpan& match : matches) {
    out.append(text, previous_end, match.start - previous_end);
    out += content_;
    previous_end = match.end;
  }
  out.append(text, previous_end, std::string::npos);
  text = std::move(out);
}

}  // namespace shardtrain::tokenizer
