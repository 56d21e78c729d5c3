#include "launch/k8s/yaml_writer.h"

#include <yaml-cpp/yaml.h>

#include <array>
#include <cctype>
#include <string_view>

#include "core/error.h"
#include "launch/k8s/text_checks.h"

namespace shardtrain::launch::k8s {
namespace {

using Json = nlohmann::ordered_json;

// Words YAML 1.1 (PyYAML, old kubectl) or 1.2 reads as null or a boolean.
bool is_reserved_word(const std::string& text) {
  static constexpr std::array<std::string_view, 30> words = {
      "null", "Null", "NULL", "~",   "y",    "Y",    "yes",  "Yes",   "YES",   "n",
      "N",    "no",   "No",   "NO",  "true", "True", "TRUE", "false", "False", "FALSE",
      "on",   "On",   "ON",   "off", "Off",  "OFF",  "<<",   "=",     "-",     "?"};
  for (std::string_view word : words) {
    if (text == word) return true;
  }
  return false;
}

bool is_plain_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '_' || c == '.' ||
         c == '/' || c == '=' || c == '+' || c == ':' || c == '@' || c == ' ';
}

void emit_string(YAML::Emitter& out, const std::string& text) {
  if (!is_valid_utf8(text)) {
    fail("the manifest text {} is not valid UTF-8; pass UTF-8 text", quote_for_error(text));
  }
  // yaml-cpp's own plain/quoted choice writes `yes`, `123` and U+0085 raw, so the choice is
  // ours; its double-quoted writer (with EscapeNonAscii) gets every escape right.
  if (plain_scalar_is_safe(text)) {
    out << text;
  } else {
    out << YAML::DoubleQuoted << text;
  }
}

void emit_node(YAML::Emitter& out, const Json& node) {
  switch (node.type()) {
    case Json::value_t::object:
      if (node.empty()) out << YAML::Flow;
      out << YAML::BeginMap;
      for (const auto& [key, value] : node.items()) {
        out << YAML::Key;
        emit_string(out, key);
        out << YAML::Value;
        emit_node(out, value);
      }
      out << YAML::EndMap;
      break;
    case Json::value_t::array:
      if (node.empty()) out << YAML::Flow;
      out << YAML::BeginSeq;
      for (const Json& item : node) emit_node(out, item);
      out << YAML::EndSeq;
      break;
    case Json::value_t::string:
      emit_string(out, node.get_ref<const std::string&>());
      break;
    case Json::value_t::boolean:
      out << node.get<bool>();
      break;
    case Json::value_t::number_integer:
      out << node.get<int64_t>();
      break;
    case Json::value_t::number_unsigned:
      out << node.get<uint64_t>();
      break;
    case Json::value_t::number_float:
      out << node.get<double>();
      break;
    default:
      out << YAML::Null;
      break;
  }
}

}  // namespace

bool plain_scalar_is_safe(const std::string& text) {
  if (text.empty() || text.size() > 512 || is_reserved_word(text)) return false;
  for (char c : text) {
    if (!is_plain_char(c)) return false;
  }
  const char first = text.front();
  // Digits, signs and dots start numbers, dates and .inf/.nan in some YAML version; '-' starts
  // a list item when a space follows; ':', '=' and '@' are indicators or reserved at the start.
  if (std::isdigit(static_cast<unsigned char>(first)) != 0 || first == '.' || first == '+' ||
      first == ':' || first == '=' || first == '@' || first == ' ') {
    return false;
  }
  if (first == '-' && (text.size() == 1 || text[1] == ' ' || text[1] == '.' ||
                       std::isdigit(static_cast<unsigned char>(text[1])) != 0)) {
    return false;
  }
  if (text.back() == ' ' || text.back() == ':') return false;
  // ": " starts a mapping value, " #" a comment.
  return text.find(": ") == std::string::npos && text.find(" #") == std::string::npos;
}

std::string to_yaml(const nlohmann::ordered_json& document) {
  YAML::Emitter out;
  out.SetOutputCharset(YAML::EscapeNonAscii);
  out.SetNullFormat(YAML::LowerNull);
  out.SetBoolFormat(YAML::TrueFalseBool);
  out.SetIndent(2);
  emit_node(out, document);
  SHARDTRAIN_CHECK(out.good(), "yaml-cpp emitter: {}", out.GetLastError());
  return std::string(out.c_str()) + "\n";
}

std::string to_yaml_stream(const std::vector<nlohmann::ordered_json>& documents) {
  std::string out;
  for (size_t i = 0; i < documents.size(); ++i) {
    if (i > 0) out += "---\n";
    out += to_yaml(documents[i]);
  }
  return out;
}

}  // namespace shardtrain::launch::k8s
