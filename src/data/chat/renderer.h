// Renderer: walks a parsed chat template (data/chat/ast.h) with a set of variables and produces
// the text, with Jinja2's runtime semantics:
//   - scopes: a for loop's body has its own scope (a `set` inside does not leak out; use a
//     namespace), `if` does not; macros see the template's top-level variables and their own
//     arguments (missing ones undefined);
//   - `loop`: index index0 revindex revindex0 first last length previtem nextitem depth depth0
//     and loop.cycle(...); `for ... if cond` filters before numbering; `else` runs when no item
//     was iterated; break / continue;
//   - {{ x }} prints str(x) (undefined prints nothing, none prints "None");
//   - {% generation %} records the [begin, end) byte span of its output in the final text
//     (transformers' assistant mask extension), when rendered at the top level.
// Every limit in RenderLimits is enforced. Errors are shardtrain::Error
// "line L, column C: what went wrong" (L, C in the template).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "data/chat/ast.h"
#include "data/chat/limits.h"
#include "data/chat/value.h"

namespace shardtrain::chat {

struct RenderOutput {
  std::string text;
  std::vector<std::pair<size_t, size_t>> generation_spans;  // byte ranges of {% generation %}
};

// `variables` are the template's context (messages, add_generation_prompt, ...); `globals`
// (functions such as range, namespace, raise_exception) sit below them.
RenderOutput render_ast(const TemplateAst& ast, const ValueDict& variables,
                        const ValueDict& globals, const RenderLimits& limits);

}  // namespace shardtrain::chat
