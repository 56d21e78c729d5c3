// Helpers shared by the readers of JSONL files (data/jsonl_dataset.h, data/prepare.h, the
// training data format probe): what counts as a blank line, and a JSON parse error as users
// should read it.
#pragma once

#include <exception>
#include <string>
#include <string_view>

namespace shardtrain {

// True when `line` holds only spaces, tabs, CR or LF: JSONL readers skip such lines.
bool is_blank_line(std::string_view line);

// nlohmann::json's exception text without its "[json.exception.parse_error.101] " prefix.
std::string json_error_message(const std::exception& error);

}  // namespace shardtrain
