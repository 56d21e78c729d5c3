// libFuzzer target for the chat template engine (data/chat/): the input is split at the first
// NUL byte into a template source and a JSON context (messages, ...; {} when absent or invalid).
// Contract under test: parsing and rendering any input either succeeds or throws
// shardtrain::Error, within the render limits: no crash, no other exception, no unbounded
// allocation or run time (limits are lowered so each input finishes fast).
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "data/chat/template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find('\0');
  const std::string source = input.substr(0, split);
  shardtrain::chat::ValueDict variables;
  if (split != std::string::npos) {
    const auto context = nlohmann::ordered_json::parse(input.substr(split + 1), nullptr, false);
    if (!context.is_discarded() && context.is_object()) {
      for (const auto& [key, value] : context.items()) {
        variables.set(key, shardtrain::chat::Value::from_json(value));
      }
    }
  }
  shardtrain::chat::RenderLimits limits;
  limits.max_output_bytes = 1 << 20;
  limits.max_steps = 100000;
  limits.max_call_depth = 50;
  try {
    const shardtrain::chat::Template compiled(source);
    compiled.render(variables, limits);
  } catch (const shardtrain::Error&) {
    // A refused template or a template error is a valid outcome.
  }
  return 0;
}
