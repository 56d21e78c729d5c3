// Template: a compiled chat template, rendered the way transformers' apply_chat_template renders
// it (Jinja2's ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and the loopcontrols
// extension, plus transformers' globals and its `tojson` filter and {% generation %} tag).
//
//   Template t(source);                       // lexes + parses; throws Error on a syntax error
//   RenderOutput out = t.render(variables);   // out.text, out.generation_spans
//
// Globals available to every template: range(stop) / range(start, stop[, step]) (at most
// limits.max_output_bytes items), namespace(...) (keyword arguments or a dict), dict(...),
// raise_exception(message) (an Error "the template raised an exception: message"), and
// strftime_now(format) (local time, like datetime.now().strftime).
// All errors are shardtrain::Error "line L, column C: ..." (template line/column); the caller
// prefixes the template's file and the conversation it was rendering.
#pragma once

#include <memory>
#include <string>

#include "data/chat/ast.h"
#include "data/chat/limits.h"
#include "data/chat/renderer.h"
#include "data/chat/value.h"

namespace shardtrain::chat {

class Template {
 public:
  explicit Template(const std::string& source);

  RenderOutput render(const ValueDict& variables, const RenderLimits& limits = {}) const;

 private:
  std::shared_ptr<const TemplateAst> ast_;
};

}  // namespace shardtrain::chat
