// YAML text from a JSON document tree: the one way the Kubernetes manifests are written, through
// yaml-cpp's emitter (Debian libyaml-cpp-dev), which owns indentation, flow/block layout and the
// escapes of double-quoted scalars.
//
// Contract: to_yaml(doc) is block-style YAML that a YAML 1.1 or 1.2 loader (PyYAML, kubectl's
// sigs.k8s.io/yaml) reads back as exactly `doc`: the same maps (key order kept), lists,
// strings, numbers, booleans and nulls. A string is written plain only when no loader could
// read it as anything else (plain_scalar_is_safe: a conservative ASCII subset); every other
// string is double-quoted with every character outside printable ASCII escaped (\x85, \x7f,
// \u2028, \xe9, ...), so control characters, DEL, C1 controls and Unicode line separators reach
// the loader as the escapes YAML defines, never raw. Empty maps and lists are written `{}` and
// `[]`.
// REQUIRES: every string in `doc` is valid UTF-8 (manifest_options.cpp checks what users type;
// an invalid string throws Error naming it).
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
