#include "data/jsonl_lines.h"

#include <fmt/format.h>

#include "core/error.h"

namespace shardtrain {

bool is_blank_line(std::string_view line) {
  return line.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

std::string jsonl_line_too_long_message(std::string_view where, size_t max_bytes) {
  constexpr size_t kMiB = size_t{1} << 20;
  const std::string limit = max_bytes % kMiB == 0 ? fmt::format("{} MiB", max_bytes / kMiB)
                                                  : fmt::format("{} bytes", max_bytes);
  return fmt::format(
      "{}: the line is longer than {}; JSONL needs one record per line (is the file a JSON "
      "array or a file without newlines?)",
      where, limit);
}

bool read_jsonl_line(std::istream& in, std::string& line, std::string_view source,
                     size_t line_number, size_t max_bytes) {
  line.clear();
  // As std::getline: the sentry flushes a tied output stream first (a command that prints each
  // result before reading the next line keeps its output when a later line fails).
  const std::istream::sentry sentry(in, /*noskipws=*/true);
  std::streambuf* buffer = in.rdbuf();
  if (!sentry || buffer == nullptr) return false;
  for (;;) {
    const int c = buffer->sbumpc();
    if (c == std::char_traits<char>::eof()) {
      in.setstate(line.empty() ? std::ios::eofbit | std::ios::failbit : std::ios::eofbit);
      return !line.empty();
    }
    if (c == '\n') return true;
    if (line.size() == max_bytes) {
      fail("{}", jsonl_line_too_long_message(fmt::format("{}:{}", source, line_number), max_bytes));
    }
    line.push_back(static_cast<char>(c));
  }
}

}  // namespace shardtrain
