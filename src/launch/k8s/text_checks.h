// What `shardtrain k8s` does with text a user typed before it reaches a manifest or an error
// line: UTF-8 validity (yaml_writer.h needs it) and a printable, one-line rendering for error
// messages, so a quoted argument holding a newline, DEL or a C1 control cannot spread an error
// over several lines or corrupt a terminal.
#pragma once

#include <string>
#include <string_view>

namespace shardtrain::launch::k8s {

bool is_valid_utf8(std::string_view text);

// `text` in single quotes with everything outside printable ASCII and ordinary non-ASCII letters
// escaped: \n, \t, \r, \xNN for other C0 controls, DEL and invalid bytes, \uNNNN for C1
// controls (U+0080..U+009F), U+2028/U+2029 and U+FEFF; a quote or backslash gets a backslash.
// Longer than 200 bytes: the first 200 and "...". Never contains a line break.
std::string quote_for_error(std::string_view text);

}  // namespace shardtrain::launch::k8s
