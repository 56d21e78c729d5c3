// Helpers shared by the readers of JSONL files (data/jsonl_dataset.h, data/prepare.h, the
// training data format probe, the tokenize and render commands): what counts as a blank line, and
// reading one line with a bound on its length. (A JSON parse error as users should read it:
// core/json_message.h.)
#pragma once

#include <cstddef>
#include <istream>
#include <string>
#include <string_view>

namespace shardtrain {

// The longest JSONL line the readers accept: 256 MiB. A record is parsed into a JSON tree several
// times its text's size, so one line of a file without newlines (a JSON array, a binary file)
// would otherwise take memory without bound.
inline constexpr size_t kMaxJsonlLineBytes = size_t{256} << 20;

// True when `line` holds only spaces, tabs, CR or LF: JSONL readers skip such lines.
bool is_blank_line(std::string_view line);

// What is wrong with a line longer than max_bytes and what to do ("the line is longer than ...";
// the caller puts the file and line before it).
std::string jsonl_line_too_long(size_t max_bytes = kMaxJsonlLineBytes);

// Reads the next line of `in` into `line` (without its '\n'), as std::getline does: false at the
// end of the input with nothing read. A line longer than max_bytes throws shardtrain::Error
// "<source>:<line_number>: ..." after reading at most max_bytes + 1 bytes of it.
bool read_jsonl_line(std::istream& in, std::string& line, std::string_view source,
                     size_t line_number, size_t max_bytes = kMaxJsonlLineBytes);

}  // namespace shardtrain
