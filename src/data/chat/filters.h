// Jinja2's built-in filters (`value | name(args)`) as Jinja2 3.1 defines them, plus transformers'
// `tojson` (json.dumps with ensure_ascii=False, indent, separators, sort_keys):
//   abs capitalize center count d default dictsort e escape first float indent int items join
//   last length list lower map max min reject rejectattr replace reverse round safe select
//   selectattr sort string sum title tojson trim unique upper wordcount
// (Jinja2 has no `split` filter; templates use the str.split() method, see data/chat/methods.h.)
// Arguments bind like Python's (positional, then by keyword). A name Jinja2 does not have is the
// Error "no filter named 'x'" (as Jinja2 itself fails); so is a filter given the wrong kind of
// value, worded like Jinja2's / Python's error.
#pragma once

#include <string>

#include "data/chat/limits.h"
#include "data/chat/value.h"

namespace shardtrain::chat {

Value apply_filter(const std::string& name, const Value& operand, const CallArgs& args,
                   const RenderLimits& limits);

bool filter_exists(const std::string& name);

}  // namespace shardtrain::chat
