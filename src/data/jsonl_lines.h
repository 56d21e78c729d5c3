// Helpers shared by the readers of JSONL files (data/jsonl_dataset.h, data/prepare.h, the
// training data format probe): what counts as a blank line. (A JSON parse error as users should
// read it: core/json_message.h.)
#pragma once

#include <string_view>

namespace shardtrain {

// True when `line` holds only spaces, tabs, CR or LF: JSONL readers skip such lines.
bool is_blank_line(std::string_view line);

}  // namespace shardtrain
