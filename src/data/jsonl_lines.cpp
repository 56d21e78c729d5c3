#include "data/jsonl_lines.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace shardtrain {

bool is_blank_line(std::string_view line) {
  return line.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

std::string jsonl_line_too_long(size_t max_bytes) {
  constexpr size_t kMiB = size_t{1} << 20;
  const std::string limit = max_bytes % kMiB == 0 ? fmt::format("{} MiB", max_bytes / kMiB)
                                                  : fmt::format("{} bytes", max_bytes);
  return fmt::format(
      "the line is longer than {}; JSONL needs one record per line (is the file a JSON array or a "
      "file without newlines?)",
      limit);
}

bool read_jsonl_line(std::istream& in, std::string& line, std::string_view source,
                     size_t line_number, size_t max_bytes) {
  line.clear();
  // istream::getline in chunks: the library scans its buffer for '\n' (several GB/s; a character
  // at a time was 8x slower), and the chunk sizes stop the read one byte past the bound.
  char chunk[1 << 16];
  for (;;) {
    const size_t room = max_bytes - line.size() + 1;  // bytes to store before the bound is passed
    const auto request = static_cast<std::streamsize>(std::min(sizeof chunk, room + 1));
    in.getline(chunk, request);  // as std::getline: flushes a tied stream (the sentry) first
    const auto got = static_cast<size_t>(in.gcount());
    if (in.bad()) return false;
    if (!in.fail()) {  // the line's '\n' (counted in gcount, not stored), or the input's end
      const bool newline = !in.eof();
      line.append(chunk, got - (newline ? 1 : 0));
      if (line.size() > max_bytes) break;
      return true;
    }
    if (got == 0) {  // nothing left: the end of the input (a line that ended on a chunk's end)
      if (line.empty()) return false;
      in.clear(std::ios::eofbit);
      return true;
    }
    line.append(chunk, got);  // the chunk filled before the '\n'
    if (line.size() > max_bytes) break;
    in.clear(in.rdstate() & ~std::ios::failbit);
  }
  in.clear(in.rdstate() & ~std::ios::failbit);  // positioned one byte past the bound
  fail("{}:{}: {}", source, line_number, jsonl_line_too_long(max_bytes));
}

}  // namespace shardtrain
