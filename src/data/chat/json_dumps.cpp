#include "data/chat/json_dumps.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "data/tokenizer/utf8.h"

namespace shardtrain::chat {
namespace {

void append_escaped(std::string& out, const std::string& text, bool ensure_ascii) {
  out += '"';
  for (char32_t cp : to_code_points(text)) {
    switch (cp) {
      case U'"':
        out += "\\\"";
        continue;
      case U'\\':
        out += "\\\\";
        continue;
      case U'\n':
        out += "\\n";
        continue;
      case U'\r':
        out += "\\r";
        continue;
      case U'\t':
        out += "\\t";
        continue;
      case U'\b':
        out += "\\b";
        continue;
      case U'\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (cp < 0x20 || (ensure_ascii && cp > 0x7e)) {
      if (cp >= 0x10000) {
        const char32_t v = cp - 0x10000;
        out += fmt::format("\\u{:04x}\\u{:04x}", static_cast<unsigned>(0xD800 + (v >> 10)),
                           static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
      } else {
        out += fmt::format("\\u{:04x}", static_cast<unsigned>(cp));
      }
      continue;
    }
    tokenizer::append_utf8(out, cp);
  }
  out += '"';
}

class Dumper {
 public:
  Dumper(const JsonDumpsOptions& options, const RenderLimits& limits)
      : options_(options), limits_(limits) {}

  void dump(const Value& value, int level) {
    check_string_size(out_.size(), limits_);
    if (level > 1000) fail("tojson: value nested deeper than 1000 levels");
    switch (value.kind()) {
      case Value::Kind::kNone:
        out_ += "null";
        return;
      case Value::Kind::kBool:
        out_ += value.as_bool() ? "true" : "false";
        return;
      case Value::Kind::kInt:
        out_ += std::to_string(value.as_int());
        return;
      case Value::Kind::kFloat:
        dump_float(value.as_double());
        return;
      case Value::Kind::kString:
        append_escaped(out_, value.as_string(), options_.ensure_ascii);
        return;
      case Value::Kind::kList:
        dump_list(value.as_list().items, level);
        return;
      case Value::Kind::kDict:
        dump_dict(value.as_dict(), level);
        return;
      default:
        fail("Object of type {} is not JSON serializable", value.type_name());
    }
  }

  std::string take() { return std::move(out_); }

 private:
  void dump_float(double value) {
    if (std::isnan(value)) {
      out_ += "NaN";
    } else if (std::isinf(value)) {
      out_ += value > 0 ? "Infinity" : "-Infinity";
    } else {
      out_ += python_float_repr(value);
    }
  }

  void newline(int level) {
    if (!options_.indent) return;
    out_ += '\n';
    for (int i = 0; i < level; ++i) out_ += *options_.indent;
  }

  void dump_list(const std::vector<Value>& items, int level) {
    if (items.empty()) {
      out_ += "[]";
      return;
    }
    out_ += '[';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out_ += options_.item_separator;
      newline(level + 1);
      dump(items[i], level + 1);
    }
    newline(level);
    out_ += ']';
  }

  void dump_dict(const ValueDict& dict, int level) {
    if (dict.entries.empty()) {
      out_ += "{}";
      return;
    }
    std::vector<const std::pair<std::string, Value>*> entries;
    for (const auto& entry : dict.entries) entries.push_back(&entry);
    if (options_.sort_keys) {
      std::stable_sort(entries.begin(), entries.end(),
                       [](const auto* a, const auto* b) { return a->first < b->first; });
    }
    out_ += '{';
    for (size_t i = 0; i < entries.size(); ++i) {
      if (i > 0) out_ += options_.item_separator;
      newline(level + 1);
      append_escaped(out_, entries[i]->first, options_.ensure_ascii);
      out_ += options_.key_separator;
      dump(entries[i]->second, level + 1);
    }
    newline(level);
    out_ += '}';
  }

  const JsonDumpsOptions& options_;
  const RenderLimits& limits_;
  std::string out_;
};

}  // namespace

std::string json_dumps(const Value& value, const JsonDumpsOptions& options,
                       const RenderLimits& limits) {
  Dumper dumper(options, limits);
  dumper.dump(value, 0);
  std::string out = dumper.take();
  check_string_size(out.size(), limits);
  return out;
}

}  // namespace shardtrain::chat
