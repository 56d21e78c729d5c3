#include "core/config.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <system_error>

#include "core/error.h"
#include "core/toml_nesting.h"

namespace shardtrain {
namespace {

bool is_key_segment(const std::string& segment) {
  if (segment.empty()) return false;
  return std::all_of(segment.begin(), segment.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  });
}

std::string trim(const std::string& text) {
  const char* space = " \t\r\n";
  const size_t begin = text.find_first_not_of(space);
  if (begin == std::string::npos) return "";
  const size_t end = text.find_last_not_of(space);
  return text.substr(begin, end - begin + 1);
}

// A TOML basic string literal, also used to quote values in error messages.
std::string quote(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          out += fmt::format("\\u{:04X}", static_cast<unsigned char>(c));
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string quote_for_message(const std::string& text) {
  constexpr size_t kMaxShown = 60;
  if (text.size() <= kMaxShown) return quote(text);
  return quote(text.substr(0, kMaxShown)) + "...";
}

// A double written so that TOML reads it back as the same float (never as an integer).
std::string format_double(double value) {
  std::string text = fmt::format("{}", value);
  if (text.find_first_not_of("-0123456789") == std::string::npos) text += ".0";
  return text;
}

std::string one_line(std::string_view text) {
  std::string out(text);
  std::replace(out.begin(), out.end(), '\n', ' ');
  return out;
}

// "FILE:LINE" when toml++ knows where the node came from, else "FILE".
std::string where(const std::string& file, const toml::source_region& source) {
  if (source.begin.line == 0) return file;
  return fmt::format("{}:{}", file, source.begin.line);
}

std::string describe(const toml::node& node) {
  if (const auto* s = node.as_string()) return "string " + quote_for_message(s->get());
  if (const auto* i = node.as_integer()) return fmt::format("integer {}", i->get());
  if (const auto* f = node.as_floating_point()) return "float " + format_double(f->get());
  if (const auto* b = node.as_boolean()) return b->get() ? "boolean true" : "boolean false";
  if (node.is_array()) return "an array";
  if (node.is_table()) return "a table";
  if (node.is_date()) return "a date";
  if (node.is_time()) return "a time";
  return "a date-time";
}

const char* type_phrase(size_t target_index) {
  switch (target_index) {
    case 0:
      return "an integer";
    case 1:
      return "a number";
    case 2:
      return "true or false";
    default:
      return "a string";
  }
}

std::string choices_text(const std::vector<std::string>& choices) {
  std::string out;
  for (size_t i = 0; i < choices.size(); ++i) out += (i ? ", " : "") + quote(choices[i]);
  return out;
}

// Config files are small text; anything larger, or anything but a regular file (/dev/zero, a
// FIFO that nobody writes, a directory), is refused before a byte is read.
constexpr std::uintmax_t kMaxConfigBytes = std::uintmax_t{4} << 20;

std::string read_file_or_fail(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) {
    fail("config {}: cannot open file ({}); check the path", path,
         ec ? ec.message() : std::string("No such file or directory"));
  }
  if (std::filesystem::is_directory(status)) {
    fail("config {}: is a directory; pass the path of a .toml file", path);
  }
  if (!std::filesystem::is_regular_file(status)) {
    fail("config {}: not a regular file (a device, FIFO or socket); pass the path of a .toml file",
         path);
  }
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (!ec && size > kMaxConfigBytes) {
    fail("config {}: {} bytes, over the {} MiB a config file may have; is this the right file?",
         path, size, kMaxConfigBytes >> 20);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    fail("config {}: cannot open file ({}); check the path", path, std::strerror(errno));
  }
  // Read at most one byte past the limit: a file that grows (or reports size 0, as /proc does)
  // is still bounded.
  std::string contents(kMaxConfigBytes + 1, '\0');
  in.read(contents.data(), static_cast<std::streamsize>(contents.size()));
  if (in.bad()) fail("config {}: read failed ({})", path, std::strerror(errno));
  contents.resize(static_cast<size_t>(in.gcount()));
  if (contents.size() > kMaxConfigBytes) {
    fail("config {}: over the {} MiB a config file may have; is this the right file?", path,
         kMaxConfigBytes >> 20);
  }
  return contents;
}

}  // namespace

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> previous(b.size() + 1), current(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) previous[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t substitute = previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, substitute});
    }
    std::swap(previous, current);
  }
  return previous[b.size()];
}

void ConfigSchema::add(const std::string& key, int64_t* target, std::string doc) {
  add_entry(key, target, std::move(doc), {});
}
void ConfigSchema::add(const std::string& key, double* target, std::string doc) {
  add_entry(key, target, std::move(doc), {});
}
void ConfigSchema::add(const std::string& key, bool* target, std::string doc) {
  add_entry(key, target, std::move(doc), {});
}
void ConfigSchema::add(const std::string& key, std::string* target, std::string doc) {
  add_entry(key, target, std::move(doc), {});
}

void ConfigSchema::add_choice(const std::string& key, std::string* target,
                              std::vector<std::string> choices, std::string doc) {
  SHARDTRAIN_CHECK(!choices.empty(), "key {}", key);
  SHARDTRAIN_CHECK(std::find(choices.begin(), choices.end(), *target) != choices.end(),
                   "default '{}' of key {} is not one of its choices", *target, key);
  add_entry(key, target, std::move(doc), std::move(choices));
}

void ConfigSchema::add_bound_choice(const std::string& key, std::vector<std::string> choices,
                                    std::function<std::string()> get,
                                    std::function<void(const std::string&)> set, std::string doc) {
  bound_names_.push_back(get());
  add_choice(key, &bound_names_.back(), std::move(choices), std::move(doc));
  entries_.back().get = std::move(get);
  entries_.back().set = std::move(set);
}

void ConfigSchema::add_entry(const std::string& key, Target target, std::string doc,
                             std::vector<std::string> choices) {
  const size_t dot = key.rfind('.');
  SHARDTRAIN_CHECK(dot != std::string::npos, "config key '{}' needs a section", key);
  std::string segment;
  std::istringstream segments(key);
  while (std::getline(segments, segment, '.')) {
    SHARDTRAIN_CHECK(is_key_segment(segment), "malformed config key '{}'", key);
  }
  SHARDTRAIN_CHECK(find(key) == nullptr, "config key '{}' registered twice", key);
  SHARDTRAIN_CHECK(!is_section(key), "config key '{}' is also a section", key);
  SHARDTRAIN_CHECK(std::visit([](auto* p) { return p != nullptr; }, target), "key {}", key);
  SHARDTRAIN_CHECK(doc.find('\n') == std::string::npos, "doc of {} must be one line", key);
  entries_.push_back(Entry{key, key.substr(0, dot), key.substr(dot + 1), target, std::move(doc),
                           std::move(choices), nullptr, nullptr});
}

const ConfigSchema::Entry* ConfigSchema::find(const std::string& key) const {
  for (const Entry& entry : entries_) {
    if (entry.key == key) return &entry;
  }
  return nullptr;
}

bool ConfigSchema::is_section(const std::string& section) const {
  for (const Entry& entry : entries_) {
    if (entry.section == section || entry.section.rfind(section + ".", 0) == 0) return true;
  }
  return false;
}

std::string ConfigSchema::suggestion(const std::string& name, bool section) const {
  std::vector<std::string> candidates;
  for (const Entry& entry : entries_) {
    if (!section) {
      candidates.push_back(entry.key);
      continue;
    }
    // Every section and its parents ("a.b" also offers "a").
    for (size_t dot = entry.section.find('.'); dot != std::string::npos;
         dot = entry.section.find('.', dot + 1)) {
      candidates.push_back(entry.section.substr(0, dot));
    }
    candidates.push_back(entry.section);
  }
  const size_t threshold = std::min<size_t>(3, std::max<size_t>(1, (name.size() + 1) / 3));
  std::string best;
  size_t best_distance = threshold + 1;
  for (const std::string& candidate : candidates) {
    const size_t distance = edit_distance(name, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  if (best.empty() && !section) {
    // "train.lr" -> "optim.lr": the same key name under exactly one other section.
    const std::string leaf = name.substr(name.rfind('.') + 1);
    for (const Entry& entry : entries_) {
      if (entry.name != leaf) continue;
      if (!best.empty()) return "";
      best = entry.key;
    }
  }
  return best.empty() ? "" : fmt::format("; did you mean '{}'?", best);
}

void ConfigSchema::write(const PendingValue& pending) {
  std::visit(
      [&](auto* target) {
        using T = std::remove_pointer_t<decltype(target)>;
        *target = std::get<T>(pending.value);
      },
      pending.entry->target);
  if (pending.entry->set) pending.entry->set(std::get<std::string>(pending.value));
}

namespace {

// Converts a TOML value to the entry's type, or fails naming `location` and the key.
template <typename Entry, typename Value>
Value convert_node(const toml::node& node, const Entry& entry, const std::string& location) {
  const size_t kind = entry.target.index();
  auto wrong_type = [&]() {
    fail("config {}: key '{}' must be {}, got {}", location, entry.key, type_phrase(kind),
         describe(node));
  };
  switch (kind) {
    case 0:
      if (!node.is_integer()) wrong_type();
      return Value(node.as_integer()->get());
    case 1: {
      if (node.is_integer()) return Value(static_cast<double>(node.as_integer()->get()));
      if (!node.is_floating_point()) wrong_type();
      const double number = node.as_floating_point()->get();
      // TOML has inf and nan literals; no setting means anything by them.
      if (!std::isfinite(number)) {
        fail("config {}: key '{}' must be a finite number, got {}", location, entry.key,
             describe(node));
      }
      return Value(number);
    }
    case 2:
      if (!node.is_boolean()) wrong_type();
      return Value(node.as_boolean()->get());
    default: {
      if (!node.is_string()) wrong_type();
      const std::string& text = node.as_string()->get();
      if (!entry.choices.empty() &&
          std::find(entry.choices.begin(), entry.choices.end(), text) == entry.choices.end()) {
        fail("config {}: key '{}' must be one of {}; got {}", location, entry.key,
             choices_text(entry.choices), quote_for_message(text));
      }
      return Value(text);
    }
  }
}

// `raw` as a number of type T (with an optional leading '+', as TOML writes it), or nullopt when
// it is not one, whole.
template <typename T>
std::optional<T> parse_number(const std::string& raw) {
  T parsed = 0;
  const char* begin = raw.data() + (raw.rfind('+', 0) == 0 ? 1 : 0);
  const auto [end, ec] = std::from_chars(begin, raw.data() + raw.size(), parsed);
  if (raw.empty() || ec != std::errc() || end != raw.data() + raw.size()) return std::nullopt;
  return parsed;
}

}  // namespace

void ConfigSchema::load_toml_file(const std::string& path) {
  load_toml_text(read_file_or_fail(path), path);
}

void ConfigSchema::load_toml_text(const std::string& contents, const std::string& path) {
  // toml++ frees nested tables recursively: refuse deep key paths before it builds them.
  if (const auto problem = toml_nesting_problem(contents)) fail("config {}: {}", path, *problem);
  toml::table root;
  try {
    root = toml::parse(contents, path);
  } catch (const toml::parse_error& error) {
    const auto& begin = error.source().begin;
    fail("config {}:{}:{}: TOML syntax error: {}", path, begin.line, begin.column,
         one_line(error.description()));
  }

  std::vector<PendingValue> pending;
  // Depth-first over nested tables; `prefix` is the dotted path of `table`.
  auto walk = [&](auto& self, const toml::table& table, const std::string& prefix) -> void {
    for (const auto& [toml_key, node] : table) {
      const std::string key =
          prefix.empty() ? std::string(toml_key.str()) : prefix + "." + std::string(toml_key.str());
      if (const Entry* entry = find(key)) {
        pending.push_back(
            {entry, convert_node<Entry, Value>(node, *entry, where(path, node.source()))});
      } else if (node.is_table() && is_section(key)) {
        self(self, *node.as_table(), key);
      } else if (is_section(key)) {
        fail("config {}: '{}' is a section, not a value; write [{}] followed by its keys",
             where(path, toml_key.source()), key, key);
      } else if (node.is_table()) {
        fail("config {}: unknown section '{}'{}", where(path, toml_key.source()), key,
             suggestion(key, /*section=*/true));
      } else {
        fail("config {}: unknown key '{}'{}", where(path, toml_key.source()), key,
             suggestion(key, /*section=*/false));
      }
    }
  };
  walk(walk, root, "");
  for (const PendingValue& value : pending) write(value);
}

void ConfigSchema::apply_override(const std::string& assignment) {
  std::string text = assignment;
  if (text.rfind("--", 0) == 0) text = text.substr(2);
  const size_t equals = text.find('=');
  std::string key = equals == std::string::npos ? "" : trim(text.substr(0, equals));
  if (find(key) == nullptr) std::replace(key.begin(), key.end(), '-', '_');
  if (key.empty()) {
    fail("config override '{}': expected section.key=value, e.g. --train.steps=5", assignment);
  }
  const Entry* entry = find(key);
  if (entry == nullptr) {
    const bool names_section = is_section(key);
    fail("config override '{}': unknown key '{}'{}", assignment, key,
         names_section ? fmt::format("; '{}' is a section, name one of its keys", key)
                       : suggestion(key, /*section=*/false));
  }
  const std::string raw = trim(text.substr(equals + 1));
  auto wrong_type = [&]() {
    fail("config override '{}': key '{}' must be {}, got {}", assignment, key,
         type_phrase(entry->target.index()), quote_for_message(raw));
  };

  Value value;
  switch (entry->target.index()) {
    case 0: {
      const std::optional<int64_t> parsed = parse_number<int64_t>(raw);
      if (!parsed) wrong_type();
      value = *parsed;
      break;
    }
    case 1: {
      const std::optional<double> parsed = parse_number<double>(raw);
      if (!parsed) wrong_type();
      if (!std::isfinite(*parsed)) {
        fail("config override '{}': key '{}' must be a finite number, got {}", assignment, key,
             quote_for_message(raw));
      }
      value = *parsed;
      break;
    }
    case 2:
      if (raw != "true" && raw != "false") wrong_type();
      value = (raw == "true");
      break;
    default: {
      std::string parsed = raw;
      const bool quoted = raw.size() >= 2 && (raw.front() == '"' || raw.front() == '\'') &&
                          raw.back() == raw.front();
      if (quoted) {
        // Quoted values follow TOML string rules (escapes in "...", none in '...').
        if (toml_nesting_problem("value = " + raw)) {
          fail("config override '{}': malformed quoted string", assignment);
        }
        try {
          parsed = toml::parse("value = " + raw)["value"].value_or(std::string());
        } catch (const toml::parse_error& error) {
          fail("config override '{}': malformed quoted string: {}", assignment,
               one_line(error.description()));
        }
      }
      if (!entry->choices.empty() &&
          std::find(entry->choices.begin(), entry->choices.end(), parsed) == entry->choices.end()) {
        fail("config override '{}': key '{}' must be one of {}; got {}", assignment, key,
             choices_text(entry->choices), quote_for_message(parsed));
      }
      value = parsed;
    }
  }
  write(PendingValue{entry, std::move(value)});
}

std::string ConfigSchema::to_toml() const {
  std::vector<std::string> sections;
  for (const Entry& entry : entries_) {
    if (std::find(sections.begin(), sections.end(), entry.section) == sections.end()) {
      sections.push_back(entry.section);
    }
  }
  std::string out;
  for (const std::string& section : sections) {
    if (!out.empty()) out += "\n";
    out += "[" + section + "]\n";
    for (const Entry& entry : entries_) {
      if (entry.section != section) continue;
      if (!entry.doc.empty()) out += "# " + entry.doc;
      if (!entry.choices.empty()) {
        out += std::string(entry.doc.empty() ? "# " : " ") + "(one of " +
               choices_text(entry.choices) + ")";
      }
      if (!entry.doc.empty() || !entry.choices.empty()) out += "\n";
      const auto print_target = [](auto* target) -> std::string {
        using T = std::remove_pointer_t<decltype(target)>;
        if constexpr (std::is_same_v<T, int64_t>) return fmt::format("{}", *target);
        if constexpr (std::is_same_v<T, double>) return format_double(*target);
        if constexpr (std::is_same_v<T, bool>) return *target ? "true" : "false";
        if constexpr (std::is_same_v<T, std::string>) return quote(*target);
      };
      const std::string value =
          entry.get ? quote(entry.get()) : std::visit(print_target, entry.target);
      out += entry.name + " = " + value + "\n";
    }
  }
  return out;
}

std::vector<std::string> ConfigSchema::keys() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const Entry& entry : entries_) out.push_back(entry.key);
  return out;
}

}  // namespace shardtrain
