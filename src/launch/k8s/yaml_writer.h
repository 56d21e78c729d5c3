// YAML text from a JSON document tree: the one way the Kubernetes manifests are written.
//
// Contract: to_yaml(doc) is block-style YAML that a YAML 1.1 or 1.2 loader (PyYAML, kubectl's
// sigs.k8s.io/yaml) reads back as exactly `doc`: the same maps (key order kept), lists,
// strings, numbers, booleans and nulls. A string is written plain only when no loader could
// read it as anything else (a number, a boolean such as `yes`/`on`, null, a date, a comment,
// an indicator); otherwise it is double-quoted with JSON escapes, which YAML shares. Empty maps
// and lists are written `{}` and `[]`. Multi-line strings are quoted (`\n`), never folded.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace shardtrain::launch::k8s {

// One document, without a leading `---`; ends with a newline.
std::string to_yaml(const nlohmann::ordered_json& document);

// Documents separated by `---` lines (a stream kubectl apply -f - accepts).
std::string to_yaml_stream(const std::vector<nlohmann::ordered_json>& documents);

// Whether `text` may be written as a plain (unquoted) YAML scalar; exposed for the tests.
bool plain_scalar_is_safe(const std::string& text);

}  // namespace shardtrain::launch::k8s
