#include "launch/k8s/yaml_writer.h"

#include <array>
#include <cctype>
#include <string_view>

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

std::string scalar(const Json& value) {
  if (value.is_string()) {
    const std::string& text = value.get_ref<const std::string&>();
    return plain_scalar_is_safe(text) ? text : value.dump(-1, ' ', false);
  }
  if (value.is_null()) return "null";
  return value.dump();  // numbers and booleans: JSON and YAML spell them alike
}

bool is_inline(const Json& value) { return !value.is_structured() || value.empty(); }

std::string inline_value(const Json& value) {
  if (value.is_object()) return "{}";
  if (value.is_array()) return "[]";
  return scalar(value);
}

void write_node(const Json& node, int indent, std::string& out);

// A map's entries, each on a line of its own at `indent`; the first line's indentation is
// already written when `first_line_started` (a list item's "- ").
void write_map(const Json& map, int indent, bool first_line_started, std::string& out) {
  bool first = true;
  for (const auto& [key, value] : map.items()) {
    if (!(first && first_line_started)) out.append(indent, ' ');
    first = false;
    out += scalar(Json(key));
    out += ':';
    if (is_inline(value)) {
      out += ' ' + inline_value(value) + '\n';
    } else if (value.is_object()) {
      out += '\n';
      write_map(value, indent + 2, false, out);
    } else {
      out += '\n';
      write_node(value, indent, out);  // a list under a key sits at the key's indentation
    }
  }
}

void write_list(const Json& list, int indent, std::string& out) {
  for (const Json& item : list) {
    out.append(indent, ' ');
    if (is_inline(item)) {
      out += "- " + inline_value(item) + '\n';
    } else if (item.is_object()) {
      out += "- ";
      write_map(item, indent + 2, true, out);
    } else {
      out += "-\n";
      write_list(item, indent + 2, out);
    }
  }
}

void write_node(const Json& node, int indent, std::string& out) {
  if (node.is_object()) {
    write_map(node, indent, false, out);
  } else {
    write_list(node, indent, out);
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
  if (is_inline(document)) return inline_value(document) + '\n';
  std::string out;
  write_node(document, 0, out);
  return out;
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
