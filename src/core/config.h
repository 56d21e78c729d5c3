// ConfigSchema: typed, validated TOML configuration, declared by each component next to itself.
//
// A component registers its settings as "section.key" names bound to fields of its own config
// struct; the field's value at registration time is the default. The schema then applies a TOML
// file and command-line overrides to those fields, and prints the whole resolved config back as
// TOML (with each key's doc as a comment) that loads again to the same values.
//
//   TrainLoopConfig train;                       // int64_t steps = 100;
//   ConfigSchema schema;
//   schema.add("train.steps", &train.steps, "optimizer steps to run");
//   schema.load_toml_file("job.toml");           // [train] steps = 20
//   schema.apply_override("train.steps=5");      // from `--train.steps=5`
//
// Guarantees: every user mistake throws shardtrain::Error with one line that names the file (with
// line:column where toml++ knows it) or the override, and the key:
//   - unknown key or section, with the nearest registered name suggested when it is close;
//   - wrong type ("key 'train.steps' must be an integer, got string \"ten\"");
//     integers are accepted for double keys;
//   - a choice outside its set (the valid choices are listed);
//   - TOML syntax errors (file:line:column and toml++'s description); a missing file.
// A file or override that fails leaves every target unchanged (values are checked before any is
// written).
//
// REQUIRES: keys have the form "section.key" (sections may nest: "a.b.key"), are registered once,
// and targets outlive the schema. Registration mistakes are bugs and abort (SHARDTRAIN_CHECK).
// Not copyable: it holds pointers into its owner's fields.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace shardtrain {

class ConfigSchema {
 public:
  ConfigSchema() = default;
  ConfigSchema(const ConfigSchema&) = delete;
  ConfigSchema& operator=(const ConfigSchema&) = delete;

  // Registers `key` bound to *target, which already holds the default. `doc` is one line.
  void add(const std::string& key, int64_t* target, std::string doc);
  void add(const std::string& key, double* target, std::string doc);
  void add(const std::string& key, bool* target, std::string doc);
  void add(const std::string& key, std::string* target, std::string doc);
  // A string restricted to `choices`. REQUIRES: *target is one of them.
  void add_choice(const std::string& key, std::string* target, std::vector<std::string> choices,
                  std::string doc);
  // An enum whose values users type as the names of `names` (in the order errors and to_toml
  // list them): parsed once, when the file or override is applied. REQUIRES: *target is one
  // of the values.
  template <typename Enum>
  void add_enum(const std::string& key, Enum* target,
                const std::vector<std::pair<std::string, Enum>>& names, std::string doc) {
    std::vector<std::string> choices;
    for (const auto& entry : names) choices.push_back(entry.first);
    const auto name_of = [target, names]() -> std::string {
      for (const auto& [name, value] : names)
        if (value == *target) return name;
      return "";
    };
    const auto set = [target, names](const std::string& chosen) {
      for (const auto& [name, value] : names)
        if (name == chosen) *target = value;
    };
    add_bound_choice(key, std::move(choices), name_of, set, std::move(doc));
  }

  // Applies every value set in the TOML file at `path`; keys it does not set keep their values.
  void load_toml_file(const std::string& path);
  // The same for TOML text; `origin` names it in error messages (as the file path would).
  void load_toml_text(const std::string& contents, const std::string& origin);
  // Applies "section.key=value" (a leading "--" is tolerated). The value is parsed per the key's
  // type: integers, numbers, true/false, or a string (quotes optional). Dashes in the key are
  // read as underscores ("train.max-grad-norm" = "train.max_grad_norm"), as torchtitan users
  // type them.
  void apply_override(const std::string& assignment);

  // The whole resolved config as TOML, one [section] per registered section in registration
  // order, each key preceded by its doc comment. load_toml_file() of it restores every value.
  std::string to_toml() const;
  // All registered keys, in registration order.
  std::vector<std::string> keys() const;

 private:
  using Target = std::variant<int64_t*, double*, bool*, std::string*>;
  struct Entry {
    std::string key;      // "train.steps"
    std::string section;  // "train"
    std::string name;     // "steps"
    Target target;
    std::string doc;
    std::vector<std::string> choices;  // empty unless registered with add_choice
    // add_enum: the bound field's current name, and the write of a checked name to it (target
    // then points into bound_names_).
    std::function<std::string()> get;
    std::function<void(const std::string&)> set;
  };
  // A parsed value waiting to be written; same alternative as the entry's target.
  using Value = std::variant<int64_t, double, bool, std::string>;
  struct PendingValue {
    const Entry* entry;
    Value value;
  };

  void add_entry(const std::string& key, Target target, std::string doc,
                 std::vector<std::string> choices);
  void add_bound_choice(const std::string& key, std::vector<std::string> choices,
                        std::function<std::string()> get,
                        std::function<void(const std::string&)> set, std::string doc);
  const Entry* find(const std::string& key) const;
  bool is_section(const std::string& section) const;
  // " did you mean 'x'?" for the registered key/section nearest to `name`, or "".
  std::string suggestion(const std::string& name, bool section) const;
  static void write(const PendingValue& pending);

  std::vector<Entry> entries_;
  std::deque<std::string> bound_names_;  // add_enum's parsed names (stable addresses)
};

// Levenshtein distance between two strings (used for "did you mean" suggestions).
size_t edit_distance(const std::string& a, const std::string& b);

}  // namespace shardtrain
